//! verify tests.
