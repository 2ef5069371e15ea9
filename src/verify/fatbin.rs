//! The GPU architectures a CUDA library carries code for, read from the
//! `.nv_fatbin` ELF section of the file itself.
//!
//! libtorch's C++ API has no `torch.cuda.get_arch_list()` (that is compiled
//! into the Python extension from the `TORCH_CUDA_ARCH_LIST` build flag). The
//! honest C++ answer is the kernels actually shipped: every fatbin entry header
//! names its kind (SASS cubin or PTX) and its SM version. This module parses
//! ELF section headers and walks fatbin containers without reading payloads.
//! Layout (little-endian), as documented by reverse-engineering notes of
//! cuobjdump's input (fatbinary.h in the CUDA toolkit declares the container
//! header):
//! - container header, 16 bytes: magic `0xBA55ED50` u32, version u16,
//!   header size u16, size of the entries that follow u64;
//! - entry header: kind u16 (1 = PTX, 2 = ELF/SASS), version u16, header size
//!   u32, padded payload size u64, …, SM arch u32 at offset 28.
//!
//! A few specialised kernels may be built for extra archs (the cu126 wheel
//! of torch 2.7.0 has sm_89 code in 2 of its 378 fatbin containers, against
//! 378 for each arch of its `TORCH_CUDA_ARCH_LIST`); an arch counts as
//! *built for* only when it has code in at least half as many entries as the
//! most common arch, and the rest are reported as partial. The cu130 wheel of
//! torch 2.11.0 reads as sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (444-503
//! entries each), with sm_89, sm_103 and sm_121 partial and no PTX; an H200
//! (sm_90) is covered exactly by both wheels.
//!
//! It must not load or execute the library.
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Fatbin container magic (fatbinary.h FATBIN_MAGIC).
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Entry kind for PTX text.
const KIND_PTX: u16 = 1;
/// Entry kind for an ELF cubin (SASS).
const KIND_ELF: u16 = 2;

pub use crate::gpus::archs::{ArchList, Coverage};

/// Raw counts of fatbin entries per (kind, arch), before classification.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryCounts {
    /// SASS entries per arch.
    pub sass: BTreeMap<u32, usize>,
    /// PTX entries per arch.
    pub ptx: BTreeMap<u32, usize>,
}

impl EntryCounts {
    /// Splits archs into built-for (≥ half the entries of the most common
    /// arch of the same kind) and partial.
    pub fn classify(&self) -> ArchList {
        let main = |m: &BTreeMap<u32, usize>| -> (BTreeSet<u32>, BTreeSet<u32>) {
            let max = m.values().copied().max().unwrap_or(0);
            let (full, part): (Vec<_>, Vec<_>) = m.iter().partition(|(_, n)| 2 * **n >= max);
            (
                full.into_iter().map(|(a, _)| *a).collect(),
                part.into_iter().map(|(a, _)| *a).collect(),
            )
        };
        let (sass, partial) = main(&self.sass);
        let (ptx, _) = main(&self.ptx);
        ArchList { sass, ptx, partial }
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}

/// `off + len`, saturating (a corrupt header must not overflow).
fn str_bound(off: u64, len: u64) -> u64 {
    off.saturating_add(len)
}

/// Finds a section by name in a 64-bit little-endian ELF file: (file offset, size).
pub fn find_section(file: &File, wanted: &str) -> std::io::Result<Option<(u64, u64)>> {
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0)?;
    if &eh[0..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a 64-bit little-endian ELF file",
        ));
    }
    let shoff = u64_at(&eh, 0x28);
    let shentsize = u16_at(&eh, 0x3A) as u64;
    let shnum = u16_at(&eh, 0x3C) as u64;
    let shstrndx = u16_at(&eh, 0x3E) as u64;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    // Elf64_Shdr is 64 bytes (elf.h); a smaller entry or an out-of-range
    // string-table index is a corrupt file, not a reason to panic.
    if shentsize < 0x28
        || shstrndx >= shnum
        || file.metadata()?.len() < str_bound(shoff, shentsize * shnum)
    {
        return Err(bad("corrupt ELF section header table"));
    }
    let mut sh = vec![0u8; (shentsize * shnum) as usize];
    file.read_exact_at(&mut sh, shoff)?;
    let sec = |i: u64| &sh[(i * shentsize) as usize..((i + 1) * shentsize) as usize];
    let strtab = sec(shstrndx);
    let (str_off, str_size) = (u64_at(strtab, 0x18), u64_at(strtab, 0x20));
    if file.metadata()?.len() < str_bound(str_off, str_size) {
        return Err(bad("corrupt ELF section name table"));
    }
    let mut names = vec![0u8; str_size as usize];
    file.read_exact_at(&mut names, str_off)?;
    for i in 0..shnum {
        let s = sec(i);
        let name_off = u32_at(s, 0) as usize;
        if name_off >= names.len() {
            continue;
        }
        let end = names[name_off..]
            .iter()
            .position(|c| *c == 0)
            .map_or(names.len(), |p| name_off + p);
        if &names[name_off..end] == wanted.as_bytes() {
            return Ok(Some((u64_at(s, 0x18), u64_at(s, 0x20))));
        }
    }
    Ok(None)
}

/// Walks the fatbin containers in `[start, start+len)` of `file`.
pub fn scan_region(file: &File, start: u64, len: u64) -> std::io::Result<EntryCounts> {
    let mut out = EntryCounts::default();
    let end = start + len;
    let mut pos = start;
    let mut hdr = [0u8; 16];
    let mut entry = [0u8; 32];
    while pos + 16 <= end {
        file.read_exact_at(&mut hdr, pos)?;
        if u32_at(&hdr, 0) != FATBIN_MAGIC {
            // Containers are 8-byte aligned; padding sits between them.
            pos += 8;
            continue;
        }
        let header_size = u16_at(&hdr, 6) as u64;
        let fat_size = u64_at(&hdr, 8);
        let entries_end = pos
            .saturating_add(header_size)
            .saturating_add(fat_size)
            .min(end);
        let mut e = pos + header_size;
        while e + 32 <= entries_end {
            file.read_exact_at(&mut entry, e)?;
            let kind = u16_at(&entry, 0);
            let ehdr = u32_at(&entry, 4) as u64;
            let payload = u64_at(&entry, 8);
            let arch = u32_at(&entry, 28);
            match kind {
                KIND_ELF => *out.sass.entry(arch).or_default() += 1,
                KIND_PTX => *out.ptx.entry(arch).or_default() += 1,
                _ => {}
            }
            if ehdr == 0 {
                break;
            }
            e = e.saturating_add(ehdr).saturating_add(payload);
        }
        // Always move forward, even past a container that claims no size.
        pos = ((entries_end + 7) & !7).max(pos + 8);
    }
    Ok(out)
}

/// The architectures the library at `path` carries code for.
pub fn arch_list(path: &Path) -> std::io::Result<ArchList> {
    let file = File::open(path)?;
    match find_section(&file, ".nv_fatbin")? {
        Some((off, size)) => Ok(scan_region(&file, off, size)?.classify()),
        None => Ok(ArchList::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn container(entries: &[(u16, u32, usize)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, payload) in entries {
            let mut h = vec![0u8; 64];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(*payload as u64).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            body.extend(h);
            body.extend(vec![0xAAu8; *payload]);
        }
        let mut c = Vec::new();
        c.extend(FATBIN_MAGIC.to_le_bytes());
        c.extend(1u16.to_le_bytes());
        c.extend(16u16.to_le_bytes());
        c.extend((body.len() as u64).to_le_bytes());
        c.extend(body);
        c
    }

    #[test]
    fn walks_containers_and_padding() {
        let mut data = container(&[(2, 80, 40), (2, 90, 24), (1, 90, 16)]);
        data.extend([0u8; 8]); // padding between containers
        data.extend(container(&[(2, 70, 8)]));
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let counts = scan_region(&f, 0, data.len() as u64).unwrap();
        assert_eq!(
            counts.sass,
            [(70, 1), (80, 1), (90, 1)].into_iter().collect()
        );
        assert_eq!(counts.ptx, [(90, 1)].into_iter().collect());
        let list = counts.classify();
        assert_eq!(list.describe(), "sm_70 sm_80 sm_90 compute_90");
    }

    #[test]
    fn a_few_specialised_kernels_do_not_make_an_arch() {
        let counts = EntryCounts {
            sass: [(80, 378), (86, 378), (89, 2), (90, 381)]
                .into_iter()
                .collect(),
            ptx: BTreeMap::new(),
        };
        let list = counts.classify();
        assert_eq!(list.sass, [80, 86, 90].into_iter().collect());
        assert_eq!(list.partial, [89].into_iter().collect());
    }

    #[test]
    fn coverage_rules() {
        let list = ArchList {
            sass: [50, 60, 70, 75, 80, 86, 90].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(list.coverage(9, 0), Coverage::Exact);
        assert_eq!(list.coverage(8, 9), Coverage::SameMajor(86));
        assert_eq!(list.coverage(10, 0), Coverage::None);
        let with_ptx = ArchList {
            ptx: [90].into_iter().collect(),
            ..list
        };
        assert_eq!(with_ptx.coverage(10, 0), Coverage::Ptx(90));
    }

    #[test]
    fn corrupt_elf_headers_are_errors_not_panics() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let mut bad = exe[..64].to_vec();
        // e_shstrndx beyond e_shnum.
        bad[0x3E..0x40].copy_from_slice(&u16::MAX.to_le_bytes());
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bad).unwrap();
        assert!(find_section(&f, ".nv_fatbin").is_err());
        // A section table past the end of the file.
        let mut short = exe[..64].to_vec();
        short[0x28..0x30].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&short).unwrap();
        assert!(find_section(&f, ".nv_fatbin").is_err());
    }

    #[test]
    fn own_binary_is_elf_without_fatbin() {
        let exe = std::env::current_exe().unwrap();
        let list = arch_list(&exe).unwrap();
        assert!(list.sass.is_empty());
    }
}
