//! train tests.
