//! Whether the full imgctl (`imgctl-torch`) can load its libtorch on this
//! host, found without starting it (a start loads about 350 MB): the
//! folders of its ELF `RUNPATH`, then a venv with torch 2.7.0 (`IMGCTL_VENV`,
//! the active `VIRTUAL_ENV`, the set-up's cache venv). The front end hands
//! a torch command over only when one of them holds libtorch; else the
//! command runs inside the image (`through_image.rs`).
use std::path::{Path, PathBuf};

/// The torch release `imgctl-torch` is built against (tch 0.20.0).
pub const TORCH_VERSION: &str = crate::sys::venv::TORCH_VERSION;

/// Where the part finds libtorch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Libtorch {
    /// In a folder of its own RUNPATH (a build on this machine, or an image).
    Runpath(PathBuf),
    /// In this venv's torch: its `torch/lib` goes on `LD_LIBRARY_PATH`.
    Venv {
        /// The venv.
        venv: PathBuf,
        /// Its `…/site-packages/torch/lib`.
        lib: PathBuf,
    },
}

/// Where `part` finds libtorch 2.7.0, or why it cannot (the places looked in).
pub fn find(part: &Path) -> Result<Libtorch, String> {
    let origin = part.parent().unwrap_or(Path::new("/"));
    if let Ok(dirs) = runpath(part) {
        for dir in dirs {
            let dir = PathBuf::from(dir.replace("$ORIGIN", &origin.to_string_lossy()));
            if dir.join("libtorch_cpu.so").is_file() {
                return Ok(Libtorch::Runpath(dir));
            }
        }
    }
    let venvs = candidate_venvs();
    for venv in &venvs {
        if let Some(lib) = torch_lib(venv) {
            return Ok(Libtorch::Venv {
                venv: venv.clone(),
                lib,
            });
        }
    }
    Err(format!(
        "no libtorch {TORCH_VERSION} in its RUNPATH nor in a venv ({})",
        venvs
            .iter()
            .map(|v| v.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The venvs looked in ([`crate::sys::venv::candidates`]).
fn candidate_venvs() -> Vec<PathBuf> {
    crate::sys::venv::candidates()
}

/// `venv`'s `…/site-packages/torch/lib` when its torch is 2.7.0.
fn torch_lib(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    for entry in lib.flatten() {
        let torch = entry.path().join("site-packages/torch");
        let version = std::fs::read_to_string(torch.join("version.py")).unwrap_or_default();
        let is_it = version.lines().any(|l| {
            l.starts_with("__version__")
                && l.split(['\'', '"']).nth(1).is_some_and(|v| {
                    v == TORCH_VERSION || v.starts_with(&format!("{TORCH_VERSION}+"))
                })
        });
        if is_it && torch.join("lib/libtorch_cpu.so").is_file() {
            return Some(torch.join("lib"));
        }
    }
    None
}

/// The `DT_RUNPATH` (else `DT_RPATH`) folders of the ELF64 little-endian
/// file `path`, as written (`$ORIGIN` left in).
pub fn runpath(path: &Path) -> std::io::Result<Vec<String>> {
    use std::io::{Error, ErrorKind, Read, Seek, SeekFrom};
    let bad = |what: &str| Error::new(ErrorKind::InvalidData, what.to_string());
    let mut f = std::fs::File::open(path)?;
    let mut head = [0u8; 64];
    f.read_exact(&mut head)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (phoff, phentsize, phnum) = (
        u64_at(&head, 0x20),
        u16_at(&head, 0x36),
        u16_at(&head, 0x38),
    );
    if phentsize < 56 || phnum > 256 {
        return Err(bad("odd program headers"));
    }
    let mut ph = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut ph)?;
    let (mut loads, mut dynamic) = (Vec::new(), None);
    for i in 0..phnum as usize {
        let p = &ph[i * phentsize as usize..];
        let kind = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
        let (offset, vaddr, filesz) = (u64_at(p, 8), u64_at(p, 16), u64_at(p, 32));
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset, filesz.min(1 << 20))),
            _ => {}
        }
    }
    let Some((offset, size)) = dynamic else {
        return Ok(Vec::new());
    };
    let mut dy = vec![0u8; size as usize];
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(&mut dy)?;
    let (mut strtab, mut wanted) = (None, Vec::new());
    for e in dy.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0), u64_at(e, 8));
        match tag {
            0 => break,
            5 => strtab = Some(val),
            29 => wanted.insert(0, val), // DT_RUNPATH first
            15 => wanted.push(val),      // DT_RPATH
            _ => {}
        }
    }
    let Some(strtab) = strtab else {
        return Ok(Vec::new());
    };
    let file_offset = loads
        .iter()
        .find(|(vaddr, _, filesz)| (*vaddr..vaddr + filesz).contains(&strtab))
        .map(|(vaddr, off, _)| strtab - vaddr + off)
        .ok_or_else(|| bad("the string table is in no loaded segment"))?;
    let mut out = Vec::new();
    if let Some(first) = wanted.first() {
        f.seek(SeekFrom::Start(file_offset + first))?;
        let mut s = Vec::new();
        std::io::BufRead::read_until(&mut std::io::BufReader::new(f.take(64 * 1024)), 0, &mut s)?;
        if s.last() == Some(&0) {
            s.pop();
        }
        out.extend(
            String::from_utf8_lossy(&s)
                .split(':')
                .filter(|d| !d.is_empty())
                .map(str::to_string),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_venv_with_torch_2_7_0_is_found_and_another_torch_is_not() {
        let venv = tempfile::tempdir().unwrap();
        let torch = venv.path().join("lib/python3.11/site-packages/torch");
        std::fs::create_dir_all(torch.join("lib")).unwrap();
        std::fs::write(torch.join("version.py"), "__version__ = '2.6.0+cpu'\n").unwrap();
        std::fs::write(torch.join("lib/libtorch_cpu.so"), "").unwrap();
        assert_eq!(torch_lib(venv.path()), None);
        std::fs::write(torch.join("version.py"), "__version__ = '2.7.0+cu126'\n").unwrap();
        assert_eq!(torch_lib(venv.path()), Some(torch.join("lib")));
    }

    #[test]
    fn the_runpath_of_an_elf_file_is_read_and_a_text_file_is_refused() {
        // This test binary is ELF; its RUNPATH (if any) reads without error.
        let me = std::env::current_exe().unwrap();
        assert!(runpath(&me).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("t");
        std::fs::write(&text, "#!/bin/sh\n".repeat(10)).unwrap();
        assert!(runpath(&text).is_err());
    }
}
