//! spec tests.
