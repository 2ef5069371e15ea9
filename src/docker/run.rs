//! Running a container to completion with GPU requests (owned by the verify work).
