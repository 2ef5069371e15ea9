//! Each command family's table of what its core errors mean for the user:
//! exit status, the flag names in the message, and the hint. Core modules
//! return their own error enums and never name a flag; these tables are where
//! those words live. One file per core area.

use super::error::Advice;

mod docker;
mod lock;

/// What `err` (one error of a chain, not its causes) means for the user, if a
/// table knows its type.
pub(crate) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    let tables: &[fn(&(dyn std::error::Error + 'static)) -> Option<Advice>] =
        &[lock::advise, docker::advise];
    tables.iter().find_map(|table| table(err))
}
