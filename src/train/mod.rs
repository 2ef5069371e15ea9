//! train (being written).

pub mod parallel;
