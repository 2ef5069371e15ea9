//! linking tests.
