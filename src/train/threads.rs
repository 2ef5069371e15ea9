//! How many intra-op threads a CPU run uses when `OMP_NUM_THREADS` does not
//! say: libtorch's default is one per core, which on a busy machine loses
//! most of the time to threads waiting for a core (measured on 2 cores, smoke
//! preset, 80 steps, debug build, interleaved runs with `farm-bench`: idle,
//! two threads took 0.72× the wall time of one; with one core held by another
//! process, two threads took 2.35× the time of one). So a run takes the cores
//! the 1-minute load average leaves free, at least one. [`choose`] is
//! arithmetic on what [`host`] read; the caller sets the count.
use crate::env_vars as ev;

/// The chosen thread count and why, for the start line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuThreads {
    /// Intra-op threads.
    pub count: usize,
    /// `OMP_NUM_THREADS`, or the cores and load it was chosen from.
    pub why: String,
}

/// The count for `available` usable cores, `OMP_NUM_THREADS`'s value and the
/// 1-minute load average (`None` where unreadable).
pub fn choose(omp: Option<&str>, available: usize, load1: Option<f64>) -> CpuThreads {
    let available = available.max(1);
    if let Some(n) = omp
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return CpuThreads {
            count: n,
            why: format!("{}={n}", ev::OMP_NUM_THREADS),
        };
    }
    match load1 {
        Some(load) if load.is_finite() && load >= 0.5 => {
            let busy = load.round() as usize;
            let count = available.saturating_sub(busy).max(1);
            CpuThreads {
                count,
                why: format!(
                    "{count} of {available} cores free at load {load:.2}; OMP_NUM_THREADS sets it"
                ),
            }
        }
        _ => CpuThreads {
            count: available,
            why: format!("{available} cores, idle; OMP_NUM_THREADS sets it"),
        },
    }
}

/// This process's usable cores and the 1-minute load average.
pub fn host() -> (usize, Option<f64>) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()));
    (cores, load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_cores_or_what_omp_num_threads_says() {
        assert_eq!(choose(None, 2, Some(0.1)).count, 2);
        assert_eq!(choose(None, 2, Some(1.2)).count, 1);
        assert_eq!(choose(None, 2, Some(7.0)).count, 1);
        assert_eq!(choose(None, 16, Some(3.6)).count, 12);
        assert_eq!(choose(None, 4, None).count, 4);
        let t = choose(Some("3"), 2, Some(5.0));
        assert_eq!((t.count, t.why.as_str()), (3, "OMP_NUM_THREADS=3"));
        // A value libgomp would not take is not ours to take either.
        assert_eq!(choose(Some("lots"), 2, Some(0.0)).count, 2);
        assert!(choose(None, 2, Some(1.2))
            .why
            .starts_with("1 of 2 cores free at load 1.20"));
    }
}
