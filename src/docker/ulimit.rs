//! What a container runtime says when it may not set a resource limit, or
//! cannot run a container at all, read from the engine's error text (#53
//! F6): the limit's name as docker's `--ulimit` spells it.

/// The limit a runtime refused, as `--ulimit` names it (`nofile`): crun
/// says "setrlimit `RLIMIT_NOFILE`", runc "error setting rlimit type 7".
pub fn refused_limit(message: &str) -> Option<String> {
    let upper = message.to_ascii_uppercase();
    if let Some(at) = upper.find("RLIMIT_") {
        let name: String = upper[at + "RLIMIT_".len()..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        return (!name.is_empty()).then(|| name.to_ascii_lowercase());
    }
    let lower = message.to_ascii_lowercase();
    let at = lower.find("rlimit type ")?;
    let number: String = lower[at + "rlimit type ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    // Linux's numbering (asm-generic/resource.h).
    let name = match number.parse::<u32>().ok()? {
        0 => "cpu",
        1 => "fsize",
        2 => "data",
        3 => "stack",
        4 => "core",
        5 => "rss",
        6 => "nproc",
        7 => "nofile",
        8 => "memlock",
        9 => "as",
        10 => "locks",
        11 => "sigpending",
        12 => "msgqueue",
        13 => "nice",
        14 => "rtprio",
        15 => "rttime",
        _ => return None,
    };
    Some(name.to_string())
}

/// Whether the runtime cannot run containers on this host's cgroups at
/// all (crun 1.8 on hybrid cgroups: v1 controllers beside a v2 tree).
pub fn runtime_cannot_run(message: &str) -> bool {
    message
        .to_ascii_lowercase()
        .contains("cgroups in hybrid mode not supported")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_runtimes_name_the_refused_limit() {
        // As the test machine's crun and runc said it (2026-12-07).
        assert_eq!(
            refused_limit(
                "crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied"
            )
            .as_deref(),
            Some("nofile")
        );
        assert_eq!(
            refused_limit("runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 6: operation not permitted").as_deref(),
            Some("nproc")
        );
        assert_eq!(
            refused_limit("error setting rlimit type 8").as_deref(),
            Some("memlock")
        );
        assert_eq!(refused_limit("error setting rlimit type 99"), None);
        assert_eq!(refused_limit("setrlimit: operation not permitted"), None);
        assert!(runtime_cannot_run(
            "OCI runtime error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2"
        ));
        assert!(!runtime_cannot_run("crun: setrlimit `RLIMIT_NOFILE`"));
    }
}
