//! bench (being written).
