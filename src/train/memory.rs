//! The memory this process may still allocate: the host's `MemAvailable`,
//! or what its memory cgroup allows when less. A leaf of `train/`: it reads
//! /proc and /sys and imports nothing of the model, so the budget and the
//! weights reader can both use it.
use std::path::Path;

/// Memory available to this process for new allocations, in bytes: the
/// host's `MemAvailable`, or what its memory cgroup still allows (limit less
/// usage, v2 or v1) when that is less — in a container started with
/// `--memory 1g` the host's figure is a lie, and going past the cgroup's
/// limit is the OOM killer's exit 137 with no message. `None` where neither
/// can be read (then nothing is refused).
pub fn host_available_bytes() -> Option<u64> {
    let host = meminfo_available();
    let cgroup = cgroup_available(Path::new("/proc/self/cgroup"), Path::new("/sys/fs/cgroup"));
    match (host, cgroup) {
        (Some(h), Some(c)) => Some(h.min(c)),
        (h, c) => h.or(c),
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn meminfo_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// A limit this large means none (v1 writes 2^63 less a page; v2 `max`).
const NO_LIMIT: u64 = 1 << 60;

/// What the memory cgroups of this process still allow, in bytes: the least
/// `limit - usage` over its cgroup and every parent (a parent's limit holds
/// for its children), for cgroup v2 (`0::PATH` in `proc_cgroup`:
/// `memory.max`, `memory.current`) or v1 (`N:memory:PATH`:
/// `memory.limit_in_bytes`, `memory.usage_in_bytes` under `memory/`). In
/// a container the path names the host's hierarchy while the container sees
/// its own cgroup at the root of `root`, so the root is read too. `None`:
/// no limit found.
pub fn cgroup_available(proc_cgroup: &Path, root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let mut best: Option<u64> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, limit_file, usage_file) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                root.join("memory"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            let read = |f: &str| -> Option<u64> {
                let t = std::fs::read_to_string(dir.join(f)).ok()?;
                t.trim().parse().ok()
            };
            if let (Some(limit), Some(usage)) = (read(limit_file), read(usage_file)) {
                if limit < NO_LIMIT {
                    let left = limit.saturating_sub(usage);
                    best = Some(best.map_or(left, |b| b.min(left)));
                }
            }
            if dir == base || !dir.pop() || !dir.starts_with(&base) {
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_limit_less_usage_is_what_is_available() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let put = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let proc_cgroup = root.join("cgroup");
        // v2: the job's own cgroup has no limit, its parent has 1 GiB.
        std::fs::write(&proc_cgroup, "0::/jobs/job1\n").unwrap();
        put("jobs/job1/memory.max", "max\n");
        put("jobs/job1/memory.current", "100\n");
        put("jobs/memory.max", "1073741824\n");
        put("jobs/memory.current", "73741824\n");
        assert_eq!(cgroup_available(&proc_cgroup, root), Some(1_000_000_000));
        // v1 inside a container: the host's path is absent, the root has the limit.
        std::fs::write(&proc_cgroup, "4:memory:/docker/abc\n3:cpu:/docker/abc\n").unwrap();
        put("memory/memory.limit_in_bytes", "536870912\n");
        put("memory/memory.usage_in_bytes", "36870912\n");
        assert_eq!(cgroup_available(&proc_cgroup, root), Some(500_000_000));
        // No limit anywhere.
        put("memory/memory.limit_in_bytes", "9223372036854771712\n");
        assert_eq!(cgroup_available(&proc_cgroup, root), None);
    }
}
