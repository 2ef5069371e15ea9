//! `imgctl lock`: resolve a spec's full Python package set with uv and write
//! its lock file (every package pinned, with the sha256 of its wheels), or
//! (`--check`) say whether the lock is missing or stale.
//!
//! This command chooses the specs (`--cuda`, `--spec`, `--all`), finds where
//! each lock goes, shows progress, and prints the outcome (JSON with
//! `--json`). The format, the digest and uv itself are [`crate::image::lock`]'s.
//! It also owns the lock's words for the user that other commands share: the
//! command that regenerates a spec's lock ([`lock_command`]) and the line
//! `build`/`render` print about it ([`build_line`]).
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::cli::LockArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::image::lock::{
    self, resolve, uv, LockFile, LockFileError, LockInputs, LockLocation, LockState,
};
use crate::image::specs::{self, LoadedSpec, SpecSource};
use crate::output::printer;

/// Version of the `--json` output.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// One spec's outcome.
#[derive(Debug, Serialize)]
struct Outcome {
    /// Spec name.
    spec: String,
    /// Where the spec was read.
    spec_origin: String,
    /// The lock file (`images/cu124.lock`), null when the spec says `lock: false`.
    lock: Option<String>,
    /// written, unchanged, up_to_date (write mode); fresh, stale, missing,
    /// invalid, disabled (--check).
    status: String,
    /// Packages in the lock, when there is a usable one.
    packages: Option<usize>,
    /// The digest of the spec's current lock inputs.
    inputs_sha256: String,
    /// What changed since the lock was made (stale), or why it is invalid.
    changes: Vec<String>,
    /// Seconds uv took to resolve (write mode).
    resolve_s: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    schema_version: u32,
    check: bool,
    ok: bool,
    locks: Vec<Outcome>,
}

/// Runs `imgctl lock`.
pub fn run(args: LockArgs) -> anyhow::Result<ExitStatus> {
    if let Some(url) = &args.pip_index_url {
        crate::image::render::check_pip_index_url(url)?;
    }
    let sources: Vec<SpecSource> = if args.all {
        specs::bundled()
            .iter()
            .filter_map(|(name, _)| specs::bundled_cuda(name))
            .map(|mm| SpecSource::Bundled {
                cuda: mm.to_string(),
            })
            .collect()
    } else {
        vec![SpecSource::from_args(
            args.cuda.as_deref(),
            args.spec.as_deref(),
        )]
    };
    // Every spec is validated before anything resolves (exit 2 at once).
    let specs = sources
        .iter()
        .map(specs::load)
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.check {
        return check(&specs, args.json);
    }
    // uv is looked for when a lock needs resolving (a fresh one needs none).
    let mut uv = None;
    let mut outcomes = Vec::new();
    for s in &specs {
        outcomes.push(write_one(s, &mut uv, &args)?);
    }
    if args.json {
        printer().json(&Report {
            schema_version: JSON_SCHEMA_VERSION,
            check: false,
            ok: true,
            locks: outcomes,
        })?;
    }
    Ok(ExitStatus::Success)
}

fn check(specs: &[LoadedSpec], json: bool) -> anyhow::Result<ExitStatus> {
    let p = printer();
    let mut outcomes = Vec::new();
    let mut bad = Vec::new();
    for s in specs {
        let state = lock::state(s);
        let location = LockLocation::of(s);
        let path = location.as_ref().map(LockLocation::display);
        let (packages, changes) = match &state {
            LockState::Fresh { lock, .. } => (Some(lock.packages.len()), Vec::new()),
            LockState::Stale { changes, .. } => (None, changes.clone()),
            LockState::Invalid { error, .. } => (None, vec![file_error_line(error)]),
            _ => (None, Vec::new()),
        };
        let line = match &state {
            LockState::Fresh { path, lock, .. } => format!(
                "{}: {path} is up to date ({} packages)",
                s.name,
                lock.packages.len()
            ),
            LockState::Disabled => {
                format!("{}: the spec says `lock: false`; nothing to check", s.name)
            }
            LockState::Missing { path, .. } => format!("{}: {path} does not exist", s.name),
            LockState::Invalid { path, error } => {
                format!(
                    "{}: {path} is not a lock file: {}",
                    s.name,
                    file_error_line(error)
                )
            }
            LockState::Stale { path, changes } => {
                format!("{}: {path} is stale: {}", s.name, changes.join("; "))
            }
        };
        match &state {
            LockState::Fresh { .. } | LockState::Disabled => p.info(&line),
            _ => {
                // One spec: the error says it; several: each gets its line.
                if specs.len() > 1 {
                    p.warn(&line);
                }
                bad.push((line, lock_command(s)));
            }
        }
        if let (LockState::Fresh { text, .. }, Some(LockLocation::Bundled { name })) =
            (&state, &location)
        {
            // In imgctl's source tree, the file may be newer than the copy embedded here.
            let on_disk = Path::new("images").join(format!("{name}.lock"));
            if let Ok(disk) = std::fs::read_to_string(&on_disk) {
                if disk != *text && source_tree_spec_matches(s, name) {
                    p.warn(format!(
                        "{}: {} differs from the copy embedded in this imgctl; rebuild imgctl (cargo build) to embed it",
                        s.name,
                        on_disk.display()
                    ));
                }
            }
        }
        outcomes.push(Outcome {
            spec: s.name.clone(),
            spec_origin: s.origin.clone(),
            lock: path,
            status: state.word().to_string(),
            packages,
            inputs_sha256: LockInputs::of(&s.spec).sha256(),
            changes,
            resolve_s: None,
        });
    }
    if json {
        printer().json(&Report {
            schema_version: JSON_SCHEMA_VERSION,
            check: true,
            ok: bad.is_empty(),
            locks: outcomes,
        })?;
    }
    match bad.len() {
        0 => Ok(ExitStatus::Success),
        1 if specs.len() == 1 => {
            let (line, cmd) = &bad[0];
            Err(CliError::failure(line.clone())
                .with_hint(format!("regenerate it with `{cmd}`"))
                .into())
        }
        n => Err(CliError::failure(format!(
            "{n} of {} locks {} missing or stale (listed above)",
            specs.len(),
            if n == 1 { "is" } else { "are" }
        ))
        .with_hint(format!(
            "regenerate them with {}",
            bad.iter()
                .map(|(_, c)| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

/// Whether `./images/<name>.yaml` is the bundled spec this imgctl embeds.
fn source_tree_spec_matches(s: &LoadedSpec, name: &str) -> bool {
    let yaml = Path::new("images").join(format!("{name}.yaml"));
    std::fs::read_to_string(yaml)
        .map(|t| specs::sha256_hex(t.as_bytes()) == s.sha256)
        .unwrap_or(false)
}

/// Where to write the lock of `s`. A bundled profile's lock goes into
/// imgctl's source tree (`images/<name>.lock` under the working directory),
/// next to a spec file that must be the one this imgctl embeds.
fn target(s: &LoadedSpec) -> anyhow::Result<PathBuf> {
    match LockLocation::of(s) {
        None => Err(CliError::usage(format!(
            "spec {} says `lock: false`; there is no lock to write",
            s.origin
        ))
        .with_hint("remove `lock: false` from the spec to lock it")
        .into()),
        Some(LockLocation::File(p)) => Ok(p),
        Some(LockLocation::Bundled { name }) => {
            let yaml = Path::new("images").join(format!("{name}.yaml"));
            if !yaml.is_file() {
                return Err(CliError::usage(format!(
                    "the bundled profile {name} is embedded in imgctl, and its lock is written into imgctl's source tree, but {} is not here",
                    yaml.display()
                ))
                .with_hint(format!(
                    "run it in imgctl's source tree, or lock a copy of the spec: `imgctl specs` shows it; then imgctl lock --spec my-{name}.yaml"
                ))
                .into());
            }
            if !source_tree_spec_matches(s, &name) {
                return Err(CliError::usage(format!(
                    "{} differs from the {name} spec embedded in this imgctl",
                    yaml.display()
                ))
                .with_hint("rebuild imgctl (cargo build) so that it embeds the spec you edited, then lock again")
                .into());
            }
            Ok(Path::new("images").join(format!("{name}.lock")))
        }
    }
}

fn write_one(s: &LoadedSpec, uv: &mut Option<uv::Uv>, args: &LockArgs) -> anyhow::Result<Outcome> {
    let p = printer();
    let path = target(s)?;
    let inputs = LockInputs::of(&s.spec);
    let display = LockLocation::of(s)
        .map(|l| l.display())
        .unwrap_or_else(|| path.display().to_string());
    let cmd = lock_command(s);
    // The file on disk (for a bundled profile, the source tree's copy).
    let existing = std::fs::read_to_string(&path).ok();
    if !args.upgrade {
        if let Some(text) = &existing {
            if let LockState::Fresh { lock, .. } =
                lock::state_of_text(&display, text.clone(), &inputs)
            {
                p.info(format!(
                    "{}: {display} is up to date ({} packages); --upgrade resolves again to the newest versions",
                    s.name,
                    lock.packages.len()
                ));
                return Ok(Outcome {
                    spec: s.name.clone(),
                    spec_origin: s.origin.clone(),
                    lock: Some(display),
                    status: "up_to_date".into(),
                    packages: Some(lock.packages.len()),
                    inputs_sha256: inputs.sha256(),
                    changes: Vec::new(),
                    resolve_s: None,
                });
            }
        }
    }
    let uv: &uv::Uv = match uv {
        Some(found) => found,
        None => uv.insert(uv::find_uv()?),
    };
    let what = format!(
        "{}: resolving {} + {} pin{} with uv {} for CPython {} on {}",
        s.name,
        inputs.torch,
        s.spec.pip.len(),
        if s.spec.pip.len() == 1 { "" } else { "s" },
        uv.version,
        inputs.python,
        inputs.platform.canonical()
    );
    let spinner = p.spinner(format!("{what}…"));
    if spinner.is_hidden() {
        p.info(format!("{what}…"));
    }
    let requirements: Vec<String> = s.spec.pip.iter().map(|pin| pin.requirement()).collect();
    let started = Instant::now();
    let result = resolve::resolve(
        uv,
        &inputs,
        &requirements,
        args.pip_index_url.as_deref(),
        &mut |line: &str| {
            let line = line.trim();
            if !spinner.is_hidden() && line.starts_with("Resolved ") {
                spinner.set_message(format!("{}: {line}", s.name));
            }
            printer().verbose(line);
        },
    );
    spinner.finish_and_clear();
    let packages = result?;
    let seconds = started.elapsed().as_secs_f64();
    let lock = LockFile::new(&inputs, packages);
    let text = lock.to_text(&s.origin, &cmd);
    // What was written must read back as the spec's fresh lock.
    match lock::state_of_text(&display, text.clone(), &inputs) {
        LockState::Fresh { .. } => {}
        LockState::Stale { changes, .. } => {
            return Err(CliError::failure(format!(
                "uv's resolution does not hold the spec's pins: {}",
                changes.join("; ")
            ))
            .into())
        }
        other => {
            return Err(CliError::failure(format!(
                "the lock imgctl made does not read back ({other:?})"
            ))
            .into())
        }
    }
    let unchanged = existing.as_deref() == Some(text.as_str());
    if !unchanged {
        write_atomically(&path, &text)?;
    }
    let embedded_note = match LockLocation::of(s) {
        Some(LockLocation::Bundled { name })
            if specs::bundled_lock(&name) != Some(text.as_str()) =>
        {
            "; rebuild imgctl (cargo build) to embed it"
        }
        _ => "",
    };
    p.info(format!(
        "{}: {} {display} ({} packages with their hashes, {} in torch's step; resolved in {seconds:.1} s){embedded_note}",
        s.name,
        if unchanged { "unchanged" } else { "wrote" },
        lock.packages.len(),
        lock.step(lock::Step::Torch).count()
    ));
    Ok(Outcome {
        spec: s.name.clone(),
        spec_origin: s.origin.clone(),
        lock: Some(display),
        status: if unchanged { "unchanged" } else { "written" }.into(),
        packages: Some(lock.packages.len()),
        inputs_sha256: inputs.sha256(),
        changes: Vec::new(),
        resolve_s: Some((seconds * 10.0).round() / 10.0),
    })
}

/// Writes `text` to `path` through a temporary file in the same folder, so a
/// reader never sees half a lock.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    crate::sys::fs::write_file_atomic(path, text.as_bytes()).map_err(|e| {
        CliError::failure(format!("cannot write {}: {e}", path.display()))
            .with_hint("check that the folder exists and is writable")
            .into()
    })
}

/// The command that (re)generates `spec`'s lock (`imgctl lock --cuda 12.4`).
pub fn lock_command(spec: &LoadedSpec) -> String {
    match (&spec.file, specs::bundled_cuda(&spec.name)) {
        (Some(file), _) => format!("imgctl lock --spec {}", file.display()),
        (None, Some(cuda)) => format!("imgctl lock --cuda {cuda}"),
        (None, None) => format!("imgctl lock --spec {}", spec.origin),
    }
}

/// Why a lock file is not used, in the user's words (the advice table's line
/// when it has one, else the error's own).
fn file_error_line(error: &LockFileError) -> String {
    super::error::advise(error)
        .and_then(|a| a.message)
        .unwrap_or_else(|| error.to_string())
}

/// What `imgctl build`/`render` say about the lock: (is it a warning, the line).
pub fn build_line(state: &LockState, spec: &LoadedSpec) -> (bool, String) {
    let cmd = lock_command(spec);
    match state {
        LockState::Fresh { path, lock, .. } => (
            false,
            format!("pip lock: {path} ({} packages)", lock.packages.len()),
        ),
        LockState::Disabled => (
            false,
            "pip lock: none (the spec says `lock: false`; transitive Python packages float)"
                .to_string(),
        ),
        LockState::Missing { path, explicit } => (
            *explicit,
            format!(
                "pip lock: {path} does not exist, so transitive Python packages float; create it with `{cmd}`"
            ),
        ),
        LockState::Invalid { path, error } => (
            true,
            format!(
                "pip lock {path} is not used, it is not a lock file ({}); regenerate it with `{cmd}`",
                file_error_line(error)
            ),
        ),
        LockState::Stale { path, changes } => (
            true,
            format!(
                "pip lock {path} is stale ({}) and not used; regenerate it with `{cmd}`",
                changes.join("; ")
            ),
        ),
    }
}
