//! render tests.
