//! build tests.
