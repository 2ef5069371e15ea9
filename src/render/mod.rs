//! render (being written).
