//! The image's creation time, from `SOURCE_DATE_EPOCH` or the spec's
//! inputs, never the wall clock (so two builds of one spec match).
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::commands::error::CliError;
use crate::env_vars::SOURCE_DATE_EPOCH;

/// The image's creation time: `SOURCE_DATE_EPOCH` (reproducible-builds.org)
/// when set, else the newest modification time of the spec's inputs (the spec
/// file, its template and its lock; for a bundled spec, which lives inside
/// imgctl, the imgctl executable). Never the wall clock: building the same
/// spec, lock and imgctl twice gives the same labels, so the same image.
pub fn created_time(
    loaded: &crate::image::specs::LoadedSpec,
    lock: &crate::image::lock::LockState,
) -> Result<SystemTime, CliError> {
    if let Some(value) = std::env::var_os(SOURCE_DATE_EPOCH) {
        if let Some(secs) = source_date_epoch(&value.to_string_lossy())? {
            return Ok(UNIX_EPOCH + Duration::from_secs(secs));
        }
    }
    let mut inputs: Vec<PathBuf> = Vec::new();
    match &loaded.file {
        Some(file) => {
            inputs.push(file.clone());
            if let (Some(template), Some(dir)) = (&loaded.spec.template, &loaded.dir) {
                inputs.push(dir.join(template));
            }
            if let crate::image::lock::LockState::Fresh { path, .. } = lock {
                inputs.push(PathBuf::from(path));
            }
        }
        None => inputs.extend(std::env::current_exe().ok()),
    }
    let newest = inputs
        .iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(UNIX_EPOCH);
    // Whole seconds: the label is written to the second.
    let secs = newest.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(UNIX_EPOCH + Duration::from_secs(secs))
}

/// The latest `SOURCE_DATE_EPOCH` an image label can carry: 9999-12-31
/// 23:59:59 UTC, the last second RFC 3339's four-digit year can write.
const MAX_SOURCE_DATE_EPOCH: u64 = 253_402_300_799;

/// `SOURCE_DATE_EPOCH`'s seconds; `None` when empty (as unset). A value
/// that is not a whole number of seconds from 0 to [`MAX_SOURCE_DATE_EPOCH`]
/// is a usage error: reproducible-builds.org's specification says a
/// malformed value fails the build, never silently stops it being
/// reproducible.
fn source_date_epoch(value: &str) -> Result<Option<u64>, CliError> {
    if value.is_empty() {
        return Ok(None);
    }
    let secs = value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u64>().ok())
        .flatten()
        .filter(|s| *s <= MAX_SOURCE_DATE_EPOCH);
    match secs {
        Some(s) => Ok(Some(s)),
        None => Err(CliError::usage(format!(
            "invalid {SOURCE_DATE_EPOCH} '{}': not a whole number of seconds since 1970 from 0 to {MAX_SOURCE_DATE_EPOCH}",
            value.escape_debug()
        ))
        .with_hint("set it to a Unix time, such as $(git log -1 --format=%ct), or unset it")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitStatus;

    #[test]
    fn source_date_epoch_is_a_whole_number_of_seconds_or_a_usage_error() {
        assert_eq!(source_date_epoch("").unwrap(), None);
        assert_eq!(source_date_epoch("0").unwrap(), Some(0));
        assert_eq!(
            source_date_epoch("1700000000").unwrap(),
            Some(1_700_000_000)
        );
        assert_eq!(
            source_date_epoch("253402300799").unwrap(),
            Some(MAX_SOURCE_DATE_EPOCH)
        );
        for bad in [
            "99999999999999",
            "18446744073709551615",
            "184467440737095516150",
            "abc",
            "-1",
            "+5",
            "nan",
            "1e400",
            " 12",
            "1.5",
        ] {
            let e = source_date_epoch(bad).unwrap_err();
            let err: anyhow::Error = e.into();
            assert_eq!(
                crate::commands::error::status_of(&err),
                ExitStatus::Usage,
                "{bad}"
            );
            assert!(
                err.to_string().starts_with("invalid SOURCE_DATE_EPOCH"),
                "{err}"
            );
        }
    }
}
