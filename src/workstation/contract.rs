//! The environment contract between `imgctl up` and the image's entrypoint
//! (`images/entrypoint.sh`): the names of the variables `up` sets in a
//! workstation, declared once. The entrypoint's opening comment lists every
//! variable it reads; a test holds each name here to that list, so that a
//! renamed or forgotten variable fails the build, not a user's workstation.

/// Which services start: `jupyter`, `ssh`, `both` (default) or `none`.
pub const MODE: &str = "IMGCTL_MODE";
/// JupyterLab's token (`up` makes one; `idle-watch` reads it inside).
pub const JUPYTER_TOKEN: &str = "JUPYTER_TOKEN";
/// The public keys let in over SSH, one per line.
pub const SSH_AUTHORIZED_KEYS: &str = "SSH_AUTHORIZED_KEYS";
/// `1`: also serve TensorBoard over the workspace.
pub const TENSORBOARD: &str = "IMGCTL_TENSORBOARD";
/// A duration (`600s`): stop the container once idle this long.
pub const IDLE_STOP: &str = "IMGCTL_IDLE_STOP";

/// Every name of this contract.
pub const ALL: &[&str] = &[
    MODE,
    JUPYTER_TOKEN,
    SSH_AUTHORIZED_KEYS,
    TENSORBOARD,
    IDLE_STOP,
];

/// `NAME=value`, as a container's environment holds it.
pub fn entry(name: &str, value: impl std::fmt::Display) -> String {
    format!("{name}={value}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables `images/entrypoint.sh` documents in its opening
    /// comment (`#   NAME   what it does`).
    fn entrypoint_names() -> Vec<String> {
        let script = include_str!("../../images/entrypoint.sh");
        script
            .lines()
            .take_while(|l| l.starts_with('#') || l.is_empty())
            .filter_map(|l| l.strip_prefix("#   "))
            .filter_map(|l| l.split_whitespace().next())
            .map(|n| n.split('=').next().unwrap_or(n).to_string())
            .filter(|n| n.chars().all(|c| c.is_ascii_uppercase() || c == '_') && n.len() > 3)
            .collect()
    }

    #[test]
    fn every_variable_up_sets_is_one_the_entrypoint_reads() {
        let names = entrypoint_names();
        assert!(names.len() >= 10, "{names:?}");
        for n in ALL {
            assert!(
                names.iter().any(|m| m == n),
                "{n} is not in entrypoint.sh's list: {names:?}"
            );
        }
    }
}
