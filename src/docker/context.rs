//! The build context: an uncompressed tar made in memory, never on disk.
//!
//! It owns the archive layout (the Dockerfile at the root, then the files the
//! template COPYs, then the imgctl binary) and the listing `--dry-run` prints.
//! Entries get fixed owners and a fixed mtime so that an unchanged context
//! hashes the same on every build and the engine's layer cache is hit. It
//! knows nothing of specs or of the engine.
use std::collections::BTreeSet;

use anyhow::Context as _;
use serde::Serialize;

use super::DockerError;

/// The mtime of every entry (the Unix epoch): identical contexts give identical
/// tars, so `COPY` layers stay cached between builds.
const FIXED_MTIME: u64 = 0;

/// One file in the context.
#[derive(Debug, Clone)]
pub struct ContextEntry {
    /// Path inside the context, relative, `/`-separated (`Dockerfile`, `imgctl`).
    pub path: String,
    /// Unix permission bits (0o644, 0o755).
    pub mode: u32,
    /// The file's bytes.
    pub contents: Vec<u8>,
}

/// A listing row for `--dry-run` and the build report.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ContextListing {
    /// Path inside the context.
    pub path: String,
    /// Permission bits, as an octal string (`0755`).
    pub mode: String,
    /// Size in bytes.
    pub size: u64,
}

/// The files of a build context, in archive order.
#[derive(Debug, Clone, Default)]
pub struct BuildContext {
    entries: Vec<ContextEntry>,
}

impl BuildContext {
    /// A context whose first entry is `Dockerfile` with `dockerfile` as its text.
    pub fn new(dockerfile: &str) -> Self {
        Self {
            entries: vec![ContextEntry {
                path: "Dockerfile".to_string(),
                mode: 0o644,
                contents: dockerfile.as_bytes().to_vec(),
            }],
        }
    }

    /// Adds a file. Paths must be relative, without `..`, and unique.
    pub fn add(&mut self, path: &str, mode: u32, contents: Vec<u8>) -> Result<(), DockerError> {
        let clean = path.trim_start_matches("./");
        if clean.is_empty()
            || clean.starts_with('/')
            || clean.split('/').any(|c| c == ".." || c.is_empty())
        {
            return Err(DockerError::ContextPath {
                path: path.to_string(),
            });
        }
        if self.entries.iter().any(|e| e.path == clean) {
            return Err(DockerError::ContextDuplicate {
                path: clean.to_string(),
            });
        }
        self.entries.push(ContextEntry {
            path: clean.to_string(),
            mode: mode & 0o7777,
            contents,
        });
        Ok(())
    }

    /// Removes the file at `path` and hands back its contents (`None` when
    /// there is none).
    pub fn take(&mut self, path: &str) -> Option<Vec<u8>> {
        let i = self.entries.iter().position(|e| e.path == path)?;
        Some(self.entries.remove(i).contents)
    }

    /// Replaces the Dockerfile text.
    pub fn set_dockerfile(&mut self, dockerfile: &str) {
        self.entries[0].contents = dockerfile.as_bytes().to_vec();
    }

    /// The Dockerfile text.
    pub fn dockerfile(&self) -> &str {
        std::str::from_utf8(&self.entries[0].contents).unwrap_or_default()
    }

    /// The entries, in archive order.
    pub fn entries(&self) -> &[ContextEntry] {
        &self.entries
    }

    /// One row per file, in archive order.
    pub fn listing(&self) -> Vec<ContextListing> {
        self.entries
            .iter()
            .map(|e| ContextListing {
                path: e.path.clone(),
                mode: format!("{:04o}", e.mode),
                size: e.contents.len() as u64,
            })
            .collect()
    }

    /// Total size of the files in bytes.
    pub fn size(&self) -> u64 {
        self.entries.iter().map(|e| e.contents.len() as u64).sum()
    }

    /// The context as an uncompressed tar archive, with parent directories
    /// before their files, owners root:root and a fixed mtime.
    pub fn to_tar(&self) -> anyhow::Result<Vec<u8>> {
        let capacity = self.size() as usize + 1024 * (self.entries.len() + 4);
        let mut builder = tar::Builder::new(Vec::with_capacity(capacity));
        let mut dirs = BTreeSet::new();
        for entry in &self.entries {
            // Parent directories first, so the archive extracts with sane modes.
            let parts: Vec<&str> = entry.path.split('/').collect();
            for depth in 1..parts.len() {
                let dir = parts[..depth].join("/");
                if dirs.insert(dir.clone()) {
                    let mut header = header(0o755, 0);
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_cksum();
                    builder
                        .append_data(&mut header, format!("{dir}/"), std::io::empty())
                        .with_context(|| format!("adding directory {dir} to the build context"))?;
                }
            }
            let mut header = header(entry.mode, entry.contents.len() as u64);
            header.set_cksum();
            builder
                .append_data(&mut header, &entry.path, entry.contents.as_slice())
                .with_context(|| format!("adding {} to the build context", entry.path))?;
        }
        builder
            .into_inner()
            .context("finishing the build-context archive")
    }
}

fn header(mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(FIXED_MTIME);
    header.set_entry_type(tar::EntryType::Regular);
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_holds_files_with_modes_and_parent_dirs() {
        let mut ctx = BuildContext::new("FROM scratch\n");
        ctx.add("files/entrypoint.sh", 0o755, b"#!/bin/sh\n".to_vec())
            .unwrap();
        ctx.add("imgctl", 0o755, vec![0x7f, b'E', b'L', b'F'])
            .unwrap();
        let tar = ctx.to_tar().unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let got: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.size().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("Dockerfile".to_string(), 0o644, 13),
                ("files/".to_string(), 0o755, 0),
                ("files/entrypoint.sh".to_string(), 0o755, 10),
                ("imgctl".to_string(), 0o755, 4),
            ]
        );
        // Deterministic: the same context gives the same bytes.
        assert_eq!(tar, ctx.to_tar().unwrap());
    }

    #[test]
    fn rejects_escaping_and_duplicate_paths() {
        let mut ctx = BuildContext::new("FROM scratch\n");
        assert!(ctx.add("../etc/passwd", 0o644, vec![]).is_err());
        assert!(ctx.add("/abs", 0o644, vec![]).is_err());
        assert!(ctx.add("Dockerfile", 0o644, vec![]).is_err());
        assert!(ctx.add("a//b", 0o644, vec![]).is_err());
        assert_eq!(ctx.listing().len(), 1);
    }
}
