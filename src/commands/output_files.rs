//! The flags that name a file to write (`--report`, `--junit`, `--plot`):
//! checked before any work ([`check_output_file`]), so that a long run does
//! not end with its result lost.
//!
//! It only checks paths and words the flag; printing is [`crate::output`]'s.
use crate::commands::error::CliError;

/// Checks, before any work, that `path` (the value of `flag`, e.g. `--junit`)
/// can take a report file: it is not a directory, its parent folder exists,
/// and the file (when it exists) or the folder is writable. A usage error
/// (exit 2) naming the cause otherwise, so that a long build or verify run
/// does not end with its result lost.
pub fn check_output_file(flag: &str, path: &std::path::Path) -> Result<(), CliError> {
    use crate::error::printable;
    let shown = printable(&path.display().to_string()).into_owned();
    let hint = format!("{flag} takes the path of a file to write, in an existing writable folder");
    let usage = |m: String| CliError::usage(m).with_hint(hint.clone());
    if path.as_os_str().is_empty() {
        return Err(usage(format!("{flag} is empty")));
    }
    if path.is_dir() {
        return Err(usage(format!(
            "{flag} {shown} is a directory; it takes a file path (e.g. {shown}/report)"
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        let what = if parent.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(usage(format!(
            "{flag} {shown}: its folder {} {what}",
            printable(&parent.display().to_string())
        )));
    }
    let target = if path.exists() { path } else { parent };
    if !crate::sys::fs::writable(target) {
        return Err(usage(format!(
            "{flag} {shown}: {} is not writable",
            printable(&target.display().to_string())
        )));
    }
    Ok(())
}
