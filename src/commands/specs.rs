//! `imgctl specs`: the bundled image profiles and their pins, as a table or JSON.
//!
//! Reads the embedded specs and the compatibility table; prints through
//! [`crate::output`] (the table and the JSON are the command's data, on stdout).
//! On a terminal (or with `COLUMNS`) the table fits its width, and `-v`
//! lists every field in full under it; piped, it has every column in full.
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use serde::Serialize;

use crate::cli::SpecsArgs;
use crate::error::ExitStatus;
use crate::image::specs::{self, compat, SpecSource};
use crate::output::{self, printer};

/// One bundled profile with its pins.
#[derive(Debug, Serialize)]
pub struct ProfileRow {
    /// Profile name (`cu124`).
    pub name: String,
    /// The `--cuda` value that selects it.
    pub cuda_flag: String,
    /// Whether `imgctl build` uses it without flags.
    pub default: bool,
    /// Base image.
    pub base_image: String,
    /// CUDA toolkit of the base.
    pub cuda: String,
    /// Python minor.
    pub python: String,
    /// torch version.
    pub torch: String,
    /// torch wheel CUDA variant.
    pub torch_variant: String,
    /// Index serving the wheel.
    pub torch_index: String,
    /// CUDA runtime bundled by the wheel.
    pub cuda_runtime: String,
    /// cuDNN bundled by the wheel.
    pub cudnn: String,
    /// NCCL bundled by the wheel.
    pub nccl: String,
    /// The GPU code the torch wheel carries (`sm_50`, …, `compute_120`).
    pub archs: Vec<String>,
    /// Lowest driver (CUDA minor-version compatibility).
    pub driver_min: String,
    /// Lowest driver for the wheel's CUDA natively.
    pub driver_native: String,
    /// exact, minor-version-compatibility or older-wheel.
    pub compat: String,
    /// Pinned pip packages (`name==version`).
    pub pip: Vec<String>,
    /// sha256 of the spec text.
    pub spec_sha256: String,
    /// The pip lock: fresh, stale, missing, invalid or disabled.
    pub lock: String,
    /// Packages the lock pins (a fresh lock only).
    pub lock_packages: Option<usize>,
}

/// The rows for every bundled profile.
pub fn rows() -> anyhow::Result<Vec<ProfileRow>> {
    let mut rows = Vec::new();
    for (name, _) in specs::bundled() {
        let loaded = specs::load(&SpecSource::Bundled {
            cuda: name.to_string(),
        })?;
        let s = &loaded.spec;
        let wheel = compat::lookup(&s.torch.version, &s.torch.variant);
        let driver = wheel.and_then(|w| compat::min_driver(w.cuda));
        let fit = wheel.map(|w| compat::fit(w.cuda, &s.cuda));
        let lock = crate::image::lock::state(&loaded);
        rows.push(ProfileRow {
            name: loaded.name.clone(),
            cuda_flag: compat::major_minor(&s.cuda),
            default: compat::major_minor(&s.cuda) == specs::DEFAULT_CUDA,
            base_image: s.base_image.to_string(),
            cuda: s.cuda.clone(),
            python: s.python.clone(),
            torch: s.torch.version.clone(),
            torch_variant: s.torch.variant.clone(),
            torch_index: s.torch.index.clone(),
            cuda_runtime: wheel.map_or("?", |w| w.cuda_runtime).to_string(),
            cudnn: wheel.map_or("?", |w| w.cudnn).to_string(),
            nccl: wheel.map_or("?", |w| w.nccl).to_string(),
            archs: crate::gpus::archs::wheel_archs(&s.torch.version, &s.torch.variant)
                .map(|w| w.list().describe().split(' ').map(str::to_string).collect())
                .unwrap_or_default(),
            driver_min: driver.map_or("?", |d| d.minor_compat_driver).to_string(),
            driver_native: driver.map_or("?", |d| d.native_driver).to_string(),
            compat: match fit {
                Some(compat::Fit::Exact) => "exact",
                Some(compat::Fit::MinorCompat) => "minor-version-compatibility",
                Some(compat::Fit::Older) => "older-wheel",
                _ => "?",
            }
            .to_string(),
            pip: s.pip.iter().map(|p| p.requirement()).collect(),
            spec_sha256: loaded.sha256.clone(),
            lock: lock.word().to_string(),
            lock_packages: match &lock {
                crate::image::lock::LockState::Fresh { lock, .. } => Some(lock.packages.len()),
                _ => None,
            },
        });
    }
    Ok(rows)
}

/// Every column and the full text: piped output.
fn full_table(rows: &[ProfileRow]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec![
            "profile",
            "--cuda",
            "base image",
            "torch",
            "CUDA runtime",
            "cuDNN",
            "NCCL",
            "GPU code",
            "python",
            "min driver",
            "pip lock",
        ]);
    for r in rows {
        table.add_row(vec![
            profile(r),
            r.cuda_flag.clone(),
            r.base_image.clone(),
            format!("{}+{}", r.torch, r.torch_variant),
            r.cuda_runtime.clone(),
            r.cudnn.clone(),
            r.nccl.clone(),
            archs(r),
            r.python.clone(),
            format!("{} ({} native)", r.driver_min, r.driver_native),
            lock(r),
        ]);
    }
    table
}

/// Column indices of [`fitted_table`], least useful first: what a narrower
/// terminal loses. The profile name says `--cuda`; the base image follows
/// from the profile; the torch wheel's variant says the CUDA runtime.
const DROP_ORDER: [usize; 6] = [1, 2, 10, 8, 4, 7];

/// The table at most `width` columns wide: the base image without its
/// `nvidia/cuda:` repository, the native driver in a column of its own, and
/// columns dropped in [`DROP_ORDER`] until it fits.
fn fitted_table(rows: &[ProfileRow], width: u16) -> (Table, Option<String>) {
    const REPO: &str = "nvidia/cuda:";
    let all_cuda = rows.iter().all(|r| r.base_image.starts_with(REPO));
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "profile",
        "--cuda",
        if all_cuda {
            "base (nvidia/cuda)"
        } else {
            "base image"
        },
        "torch",
        "CUDA runtime",
        "cuDNN",
        "NCCL",
        "GPU code",
        "python",
        "min driver",
        "native driver",
        "pip lock",
    ]);
    for r in rows {
        let base = match r.base_image.strip_prefix(REPO) {
            Some(tag) if all_cuda => tag.to_string(),
            _ => r.base_image.clone(),
        };
        table.add_row(vec![
            profile(r),
            r.cuda_flag.clone(),
            base,
            format!("{}+{}", r.torch, r.torch_variant),
            r.cuda_runtime.clone(),
            r.cudnn.clone(),
            r.nccl.clone(),
            archs(r),
            r.python.clone(),
            r.driver_min.clone(),
            r.driver_native.clone(),
            match r.lock_packages {
                Some(n) => format!("{n} pkgs"),
                None => r.lock.clone(),
            },
        ]);
    }
    let hidden = output::drop_columns(&mut table, width, &DROP_ORDER);
    let note =
        super::narrow::dropped_columns_line(&output::dropped_columns(&table, &hidden), width);
    output::fit_table(&mut table, output::Fit::Cut(width));
    (table, note)
}

/// `sm_50…sm_90`, `sm_75…sm_120 +PTX 120`: the first and last machine
/// code, and the PTX (`--json` lists every arch).
fn archs(r: &ProfileRow) -> String {
    let sass: Vec<&str> = r
        .archs
        .iter()
        .filter_map(|a| a.strip_prefix("sm_"))
        .collect();
    let ptx: Vec<&str> = r
        .archs
        .iter()
        .filter_map(|a| a.strip_prefix("compute_"))
        .collect();
    let mut out = match (sass.first(), sass.last()) {
        (Some(a), Some(b)) if a != b => format!("sm_{a}…{b}"),
        (Some(a), _) => format!("sm_{a}"),
        _ => "?".to_string(),
    };
    if !ptx.is_empty() {
        out.push_str(&format!(" +PTX {}", ptx.join(" ")));
    }
    out
}

/// `cu124 (default)`.
fn profile(r: &ProfileRow) -> String {
    format!("{}{}", r.name, if r.default { " (default)" } else { "" })
}

/// `149 packages`, or the lock's state.
fn lock(r: &ProfileRow) -> String {
    match r.lock_packages {
        Some(n) => format!("{n} packages"),
        None => r.lock.clone(),
    }
}

/// Runs `imgctl specs`.
pub fn run(args: SpecsArgs) -> anyhow::Result<ExitStatus> {
    let rows = rows()?;
    let p = printer();
    if args.json {
        p.json(&serde_json::json!({ "schema_version": 1, "profiles": rows }))?;
        return Ok(ExitStatus::Success);
    }
    // A table of ten columns wrapped into 80 is unreadable: on a terminal
    // the table always fits, and `-v` adds every field in full below it.
    let width = output::table_width(output::Stream::Stdout);
    let (table, dropped) = match width {
        Some(w) => fitted_table(&rows, w),
        None => (full_table(&rows), None),
    };
    p.data(table.to_string());
    if let Some(line) = dropped.filter(|_| p.verbose == 0) {
        p.info(output::wrap_text(
            &format!("{line}; -v lists every field"),
            output::table_width(output::Stream::Stderr),
        ));
    }
    if p.verbose > 0 && width.is_some() {
        for r in &rows {
            p.data(output::wrap_text(
                &format!(
                    "{}: base image {}, --cuda {}, torch {}+{} from {}, CUDA runtime {}, cuDNN {}, NCCL {}, GPU code {}, python {}, min driver {} ({} native), pip lock {}",
                    profile(r),
                    r.base_image,
                    r.cuda_flag,
                    r.torch,
                    r.torch_variant,
                    r.torch_index,
                    r.cuda_runtime,
                    r.cudnn,
                    r.nccl,
                    r.archs.join(" "),
                    r.python,
                    r.driver_min,
                    r.driver_native,
                    lock(r)
                ),
                width,
            ));
        }
    }
    for r in rows
        .iter()
        .filter(|r| r.compat == "minor-version-compatibility")
    {
        p.info(output::wrap_text(
            &format!(
                "note: {} carries the {} wheel on a CUDA {} base (torch {} has no build for it); it runs by CUDA minor-version compatibility",
                r.name, r.torch_variant, r.cuda, r.torch
            ),
            output::table_width(output::Stream::Stderr),
        ));
    }
    Ok(ExitStatus::Success)
}
