//! parallel tests.
