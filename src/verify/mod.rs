//! verify (being written).
