//! Which files are mapped into this process, from `/proc/self/maps`: how the
//! NCCL and CUDA runtime shims find the very libraries libtorch loaded, and
//! how verify reports which libcudart/libcublas/libcudnn/libnccl torch really
//! uses. Owns parsing the maps text (paths with spaces, ` (deleted)` marks)
//! and matching a soname; must not open or load anything.
use std::path::PathBuf;

/// The distinct file paths mapped in a `/proc/<pid>/maps` text, in order of
/// first appearance (` (deleted)` suffixes removed; paths may contain spaces).
pub fn parse_maps(text: &str) -> Vec<PathBuf> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // address perms offset dev inode [path]; the path may contain spaces.
        let mut fields = line.splitn(6, ' ');
        let (Some(_), Some(_), Some(_), Some(_), Some(_)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or("").trim_start();
        if !path.starts_with('/') {
            continue; // [heap], [stack], anonymous
        }
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if seen.insert(path.to_string()) {
            out.push(PathBuf::from(path));
        }
    }
    out
}

/// The files mapped in this process (`/proc/self/maps`).
pub fn mapped_files() -> std::io::Result<Vec<PathBuf>> {
    Ok(parse_maps(&std::fs::read_to_string("/proc/self/maps")?))
}

/// The first of `files` whose file name is `soname` or `soname.<more>`
/// (`libnccl.so.2.26.2`).
pub fn find_library(files: &[PathBuf], soname: &str) -> Option<PathBuf> {
    files
        .iter()
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|name| {
                name == soname
                    || name
                        .strip_prefix(soname)
                        .is_some_and(|rest| rest.starts_with('.'))
            })
        })
        .cloned()
}

/// The path of a shared library mapped into this process whose file name is
/// `soname` or `soname.<more>` (`libnccl.so.2.26.2`), from `/proc/self/maps`.
pub fn mapped_library(soname: &str) -> Option<PathBuf> {
    find_library(&mapped_files().ok()?, soname)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_library_finds_libc() {
        // Every process maps libc.so.6; an absent library is not found.
        assert!(mapped_library("libc.so.6").is_some());
        assert!(mapped_library("libnosuch.so.1").is_none());
    }

    #[test]
    fn find_library_matches_the_soname_and_its_longer_versions_only() {
        let files = parse_maps(
            "\
7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libnccl.so
7f01-7f02 r-xp 00000000 08:01 2 /opt/nccl/libnccl.so.20
7f02-7f03 r-xp 00000000 08:01 3 /tmp/dir with space/libnccl.so.2.26.2 (deleted)
7f03-7f04 r-xp 00000000 08:01 4 /usr/lib/libnccl.so.2
7f04-7f05 rw-p 00000000 00:00 0                          [heap]
",
        );
        assert_eq!(files.len(), 4);
        // `libnccl.so` and `libnccl.so.20` are not `libnccl.so.2`; the first
        // match wins, even with spaces in its folder and a `(deleted)` mark.
        assert_eq!(
            find_library(&files, "libnccl.so.2"),
            Some(PathBuf::from("/tmp/dir with space/libnccl.so.2.26.2"))
        );
        assert_eq!(
            find_library(&files, "libnccl.so"),
            Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so"))
        );
        assert_eq!(find_library(&files, "libcudart.so.12"), None);
    }
}
