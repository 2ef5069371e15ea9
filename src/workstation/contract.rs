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

/// What `up` sets for the workstation's own imgctl (the GPUs the quick
/// verify expects): an SSH session must get it as a notebook does (#53 F4),
/// so the entrypoint passes it to sshd (`ssh_environment`).
pub const EXPECT_GPUS: &str = crate::env_vars::IMGCTL_EXPECT_GPUS;

/// The variables of this contract that SSH sessions get too.
pub const SSH_PASSED: &[&str] = &[EXPECT_GPUS];

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
    fn ssh_sessions_get_what_up_sets_for_the_workstation_s_imgctl() {
        let script = include_str!("../../images/entrypoint.sh");
        let body = script
            .split("ssh_environment() {")
            .nth(1)
            .and_then(|b| b.split("\n}\n").next())
            .expect("entrypoint.sh has ssh_environment");
        for n in SSH_PASSED {
            assert!(body.contains(n), "ssh_environment does not pass {n}");
        }
    }

    #[test]
    fn ssh_gets_no_secret_in_any_case_nor_a_url_with_credentials() {
        // #50 low: HF_Token, NCCL_AUTH and https://user:pass@host passed.
        let script = include_str!("../../images/entrypoint.sh");
        let start = script.find("ssh_environment() {").unwrap();
        let end = start + script[start..].find("\n}\n").unwrap() + 3;
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{}ssh_environment", &script[start..end]))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("IMGCTL_EXPECT_GPUS", "0")
            .env("HF_Token", "t")
            .env("HF_HUB_PASSWD", "p")
            .env("NCCL_AUTH", "a")
            .env("TORCH_CREDENTIAL", "c")
            .env("HF_ENDPOINT", "https://me:secret@hub.example")
            .env("HF_HOME", "/home/dev/.cache/hf")
            .output()
            .unwrap();
        let passed = String::from_utf8_lossy(&out.stdout);
        assert!(passed.contains("\"IMGCTL_EXPECT_GPUS=0\""), "{passed}");
        assert!(
            passed.contains("\"HF_HOME=/home/dev/.cache/hf\""),
            "{passed}"
        );
        for secret in [
            "HF_Token",
            "HF_HUB_PASSWD",
            "NCCL_AUTH",
            "TORCH_CREDENTIAL",
            "secret@",
        ] {
            assert!(!passed.contains(secret), "{secret} passed: {passed}");
        }
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
