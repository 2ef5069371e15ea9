//! Peak resident memory of this process on Linux, for the CPU benchmark:
//! `VmHWM` and `VmRSS` from `/proc/self/status`, with the high-water mark
//! reset through `/proc/self/clear_refs` (value 5, Linux ≥ 4.0) so a
//! measurement covers only the steps around it, not model building.
//!
//! glibc keeps freed blocks below its (self-raising) mmap threshold in the
//! heap, resident, so a step's transient tensors would hide in the RSS
//! before the next step. [`exact_accounting`] fixes the threshold at 1 MiB:
//! every larger tensor is then mapped on allocation and unmapped on free,
//! and RSS follows the live tensors.

/// Resident set size now and its high-water mark, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rss {
    /// `VmRSS`.
    pub current: u64,
    /// `VmHWM`.
    pub peak: u64,
}

/// Reads `VmRSS` and `VmHWM`; `None` where `/proc` does not have them.
pub fn read() -> Option<Rss> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    Some(Rss {
        current: field("VmRSS")?,
        peak: field("VmHWM")?,
    })
}

/// Resets the high-water mark to the current RSS, after giving the heap's
/// free pages back ([`crate::sys::process::trim_heap`]): blocks below the
/// mmap threshold that earlier steps freed would otherwise stay resident and
/// count as memory in use before the steps, hiding the growth of the next
/// ones. False where the kernel does not allow the reset (the peak then
/// covers the whole process).
pub fn reset_peak() -> bool {
    crate::sys::process::trim_heap();
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The host's total memory (`MemTotal`), in bytes.
pub fn total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        rest.trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    })
}

/// Makes glibc map every allocation of 1 MiB or more on its own and unmap it
/// on free (a fixed `M_MMAP_THRESHOLD`), so RSS tracks live tensors.
pub fn exact_accounting() {
    crate::sys::process::set_mmap_threshold(1 << 20);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touched_allocation_raises_the_peak() {
        exact_accounting();
        let before = read().expect("/proc/self/status");
        assert!(before.peak >= before.current);
        reset_peak();
        // The peak outlives the 64 MiB it saw, which are unmapped on free;
        // read right after, so that the other tests of this process (which
        // allocate and free beside it) move `current` little in between.
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        drop(v);
        let after = read().unwrap();
        assert!(
            after.peak >= after.current + (60 << 20),
            "{before:?} {after:?}"
        );
        assert!(total().unwrap() > 0);
    }
}
