//! docker (being written).
