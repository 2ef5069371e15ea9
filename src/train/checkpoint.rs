//! Checkpoint directories: naming, atomic publication, retention, discovery
//! and the `state.json` record.
//!
//! A checkpoint is `OUT/checkpoints/step-000100/` holding `model.safetensors`
//! (diffusers `UNet2DModel` keys), `ema.safetensors`, `optimizer.safetensors`
//! (`exp_avg.<key>`, `exp_avg_sq.<key>`), `config.json` (diffusers model
//! config) and `state.json` ([`State`]). It is written into
//! `step-000100.tmp-<pid>`, every file and the directory fsynced, then renamed
//! into place, so a crash never leaves a half-written `step-*` directory.
//! Owns file layout only; the trainer decides what the tensors are.
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::TrainConfig;
use super::optim::GradScaler;

/// Directory of the checkpoints inside an output directory.
pub const CHECKPOINTS: &str = "checkpoints";
/// The weights file (diffusers names).
pub const MODEL_FILE: &str = "model.safetensors";
/// The EMA weights file (diffusers names).
pub const EMA_FILE: &str = "ema.safetensors";
/// The optimizer moments file.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The run state file.
pub const STATE_FILE: &str = "state.json";
/// The diffusers model config file.
pub const CONFIG_FILE: &str = "config.json";

/// Version of the `state.json` layout.
pub const STATE_VERSION: u32 = 1;

/// Everything besides tensors needed to continue a run exactly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Layout version ([`STATE_VERSION`]).
    pub schema_version: u32,
    /// Optimizer steps completed.
    pub step: u64,
    /// Epoch the next sample comes from.
    pub epoch: u64,
    /// Global samples consumed: the data, noise and timestep streams are pure
    /// functions of `(seed, sample position)`, so this and the seed are the
    /// whole RNG state.
    pub samples_seen: u64,
    /// The run's seed.
    pub seed: u64,
    /// AdamW step count.
    pub optimizer_step: u64,
    /// EMA update count.
    pub ema_step: u64,
    /// Loss scaler state (fp16 runs).
    pub scaler: Option<GradScaler>,
    /// Ranks that trained this checkpoint.
    pub world_size: usize,
    /// Images per rank per step.
    pub batch_size: usize,
    /// The per-rank batch the run's configuration asked for, before an
    /// elastic restart on another number of ranks changed `batch_size` to
    /// keep the global batch (`super::elastic`); `None` in checkpoints
    /// written before it was recorded (then `batch_size`).
    #[serde(default)]
    pub configured_batch_size: Option<usize>,
    /// The precision used.
    pub precision: String,
    /// The last step's loss.
    pub last_loss: Option<f64>,
    /// The full run configuration.
    pub config: TrainConfig,
    /// The data the run trained on; `None` in checkpoints written before it
    /// was recorded (those resume on whatever `--data` says).
    #[serde(default)]
    pub data: Option<DataSource>,
    /// Seconds since the Unix epoch when written.
    pub written_at: f64,
}

/// The training data a checkpoint's run used, so `--resume` continues on the
/// same images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DataSource {
    /// The embedded synthetic dataset.
    Synthetic {
        /// Images in one epoch (`training.synthetic_images`).
        images: usize,
        /// The seed the images are generated from (`training.seed`).
        seed: u64,
    },
    /// A folder of PNG/JPEG images (absolute when it could be resolved).
    Folder {
        /// The folder.
        path: PathBuf,
    },
}

/// `step-000100`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:06}")
}

/// The step of a `step-NNNNNN` directory name.
pub fn parse_step_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Complete checkpoints (those with a `state.json`) under `out`, oldest first.
pub fn list(out: &Path) -> Vec<(u64, PathBuf)> {
    let dir = out.join(CHECKPOINTS);
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = parse_step_dir(&name)?;
            let path = e.path();
            path.join(STATE_FILE).is_file().then_some((step, path))
        })
        .collect();
    found.sort();
    found
}

/// The newest complete checkpoint under `out`.
pub fn latest(out: &Path) -> Option<PathBuf> {
    list(out).pop().map(|(_, p)| p)
}

/// Why the checkpoint in `dir` cannot be resumed from, if it cannot: its
/// `state.json` does not parse, or one of its safetensors files is missing,
/// has no valid header, or is shorter (or longer) than its header says (a
/// copy or a disk that stopped part-way). Reads the headers only, not the
/// tensors.
pub fn damage(dir: &Path) -> Option<String> {
    if let Err(e) = read_state(dir) {
        return Some(e.to_string());
    }
    for name in [MODEL_FILE, EMA_FILE, OPTIMIZER_FILE] {
        if let Err(why) = check_safetensors(&dir.join(name)) {
            return Some(format!("{name} {why}"));
        }
    }
    None
}

/// Checks that a safetensors file is whole: its header parses and the
/// file is exactly as long as the header's tensors need.
fn check_safetensors(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut f = crate::sys::fs::open_regular(path).map_err(|e| format!("cannot be read: {e}"))?;
    let size = f
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?
        .len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| format!("is truncated ({size} bytes, no header)"))?;
    let header_len = u64::from_le_bytes(len);
    if header_len > size.saturating_sub(8) {
        return Err(format!(
            "is truncated ({size} bytes, shorter than its {header_len}-byte header)"
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header)
        .map_err(|e| format!("cannot be read: {e}"))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| format!("has a damaged header ({e})"))?;
    let data_end = header
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let want = 8 + header_len + data_end;
    if size != want {
        return Err(format!(
            "is truncated or damaged ({size} bytes, its header needs {want})"
        ));
    }
    Ok(())
}

/// The newest checkpoint under `out` that [`damage`] finds nothing wrong
/// with, and the newer ones it skipped with the reason, newest first.
pub fn latest_intact(out: &Path) -> (Option<PathBuf>, Vec<(PathBuf, String)>) {
    let mut damaged = Vec::new();
    for (_, dir) in list(out).into_iter().rev() {
        match damage(&dir) {
            None => return (Some(dir), damaged),
            Some(why) => damaged.push((dir, why)),
        }
    }
    (None, damaged)
}

/// Renames every damaged checkpoint under `out` to `step-NNNNNN.damaged`
/// (replacing an older one of that name), out of [`list`]'s sight, so that
/// [`prune`] never keeps it in place of a good one and a later `--resume`
/// does not read it again; the files stay for inspection. Returns the new
/// paths.
pub fn set_aside_damaged(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut moved = Vec::new();
    for (_, dir) in list(out) {
        if damage(&dir).is_none() {
            continue;
        }
        let aside = dir.with_extension("damaged");
        if aside.exists() {
            std::fs::remove_dir_all(&aside)?;
        }
        std::fs::rename(&dir, &aside)?;
        moved.push(aside);
    }
    Ok(moved)
}

/// A checkpoint directory from a user path: a `step-*` directory itself, or an
/// output directory (its latest checkpoint). Exit 2 when neither.
pub fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    if path.join(STATE_FILE).is_file() {
        return Ok(path.to_path_buf());
    }
    if let Some(p) = latest(path) {
        return Ok(p);
    }
    if path.is_dir() {
        return Err(CheckpointError::NoCheckpoint {
            path: path.to_path_buf(),
        }
        .into());
    }
    Err(CheckpointError::NotFound {
        path: path.to_path_buf(),
    }
    .into())
}

/// The largest `state.json` read (1 MiB; imgctl writes about 4 KiB).
pub const MAX_STATE_BYTES: u64 = 1 << 20;

/// Reads a checkpoint's `state.json`.
pub fn read_state(dir: &Path) -> anyhow::Result<State> {
    let path = dir.join(STATE_FILE);
    let text = match crate::sys::fs::read_regular_text(&path, MAX_STATE_BYTES) {
        Ok(text) => text,
        Err(error) => return Err(CheckpointError::ReadState { path, error }.into()),
    };
    let state: State = match serde_json::from_str(&text) {
        Ok(state) => state,
        Err(error) => return Err(CheckpointError::BadState { path, error }.into()),
    };
    if state.schema_version != STATE_VERSION {
        return Err(CheckpointError::Version {
            path,
            found: state.schema_version,
        }
        .into());
    }
    Ok(state)
}

/// A checkpoint that cannot be found or read (all usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An existing directory with no checkpoint in it.
    #[error("no checkpoint in {}", .path.display())]
    NoCheckpoint {
        /// The directory.
        path: PathBuf,
    },
    /// A path that does not exist.
    #[error("checkpoint path {} does not exist", .path.display())]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// A `state.json` that cannot be read.
    #[error("cannot read {}: {error}", .path.display())]
    ReadState {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// A `state.json` that does not parse.
    #[error("{} is not a valid imgctl checkpoint state: {error}", .path.display())]
    BadState {
        /// The file.
        path: PathBuf,
        /// The parse error.
        error: serde_json::Error,
    },
    /// A `state.json` of another layout version.
    #[error("{} has schema_version {found}, this imgctl reads {STATE_VERSION}", .path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its `schema_version`.
        found: u32,
    },
}

fn fsync_path(path: &Path) -> std::io::Result<()> {
    File::open(path)?.sync_all()
}

/// `dir/name.<tag>-<pid>`: a sibling of `path` private to this process.
fn sibling(path: &Path, tag: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.{tag}-{}", std::process::id()))
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Writes `bytes` to `path` atomically ([`crate::sys::fs::write_file_atomic`]),
/// so a reader sees the old file or the new one, never a part.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::sys::fs::write_file_atomic(path, bytes)
}

/// Writes the directory `dest` atomically: `fill` writes the files into a
/// temporary sibling directory, which is fsynced and renamed to `dest`. An
/// older `dest` is moved aside first and removed after, so a complete
/// directory exists at every instant.
pub fn write_dir_atomic(
    dest: &Path,
    fill: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let tmp = sibling(dest, "tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir(&tmp)?;
    let result = fill(&tmp).and_then(|()| {
        for entry in std::fs::read_dir(&tmp)? {
            fsync_path(&entry?.path())?;
        }
        fsync_path(&tmp)?;
        Ok(())
    });
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dest.exists() {
        let old = sibling(dest, "old");
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(dest, &old)?;
        std::fs::rename(&tmp, dest)?;
        std::fs::remove_dir_all(&old)?;
    } else {
        std::fs::rename(&tmp, dest)?;
    }
    fsync_path(parent_of(dest))?;
    Ok(())
}

/// Writes a checkpoint for `step` atomically ([`write_dir_atomic`]): `fill`
/// writes the files into a temporary directory, which is renamed to
/// `step-NNNNNN`. An older directory of the same step (a resumed run
/// re-saving) is replaced. Returns the final path.
pub fn write_atomic(
    out: &Path,
    step: u64,
    fill: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let root = out.join(CHECKPOINTS);
    std::fs::create_dir_all(&root)?;
    let dest = root.join(step_dir_name(step));
    write_dir_atomic(&dest, fill)?;
    Ok(dest)
}

/// Deletes all but the newest `keep` checkpoints, and temporary directories
/// left by this process. Returns the removed paths.
pub fn prune(out: &Path, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let all = list(out);
    let mut removed = Vec::new();
    if all.len() > keep {
        for (_, p) in &all[..all.len() - keep] {
            std::fs::remove_dir_all(p)?;
            removed.push(p.clone());
        }
    }
    Ok(removed)
}

/// Removes `*.tmp-*` / `*.old-*` directories that crashed runs left behind.
pub fn remove_stale_temporaries(out: &Path) {
    let root = out.join(CHECKPOINTS);
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("step-") && (name.contains(".tmp-") || name.contains(".old-")) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(step_dir_name(100), "step-000100");
        assert_eq!(parse_step_dir("step-000100"), Some(100));
        assert_eq!(parse_step_dir("step-1234567"), Some(1_234_567));
        assert_eq!(parse_step_dir("step-000100.tmp-5"), None);
    }

    #[test]
    fn atomic_write_keep_and_latest() {
        let dir = tempfile::tempdir().unwrap();
        for step in [1, 2, 3, 4] {
            write_atomic(dir.path(), step, |d| {
                std::fs::write(d.join(STATE_FILE), "{}")?;
                Ok(())
            })
            .unwrap();
        }
        // A failed write leaves nothing behind.
        let err = write_atomic(dir.path(), 5, |_| Err(anyhow::anyhow!("disk full")));
        assert!(err.is_err());
        assert_eq!(
            latest(dir.path()).unwrap().file_name().unwrap(),
            "step-000004"
        );
        let removed = prune(dir.path(), 2).unwrap();
        assert_eq!(removed.len(), 2);
        let left: Vec<u64> = list(dir.path()).into_iter().map(|(s, _)| s).collect();
        assert_eq!(left, vec![3, 4]);
        let names: Vec<String> = std::fs::read_dir(dir.path().join(CHECKPOINTS))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains("tmp")), "{names:?}");
        assert_eq!(
            resolve(dir.path()).unwrap(),
            dir.path().join(CHECKPOINTS).join("step-000004")
        );
    }

    #[test]
    fn file_and_dir_writes_replace_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("summary.json");
        write_file_atomic(&f, b"one").unwrap();
        write_file_atomic(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let d = dir.path().join("unet");
        for text in ["old", "new"] {
            write_dir_atomic(&d, |tmp| {
                std::fs::write(tmp.join("config.json"), text)?;
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(std::fs::read(d.join("config.json")).unwrap(), b"new");
        // A failed fill keeps the previous directory.
        let err = write_dir_atomic(&d, |_| Err(anyhow::anyhow!("disk full")));
        assert!(err.is_err());
        assert_eq!(std::fs::read(d.join("config.json")).unwrap(), b"new");
        // Writing into a missing directory fails and leaves nothing.
        assert!(write_file_atomic(&dir.path().join("no/such.png"), b"x").is_err());
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["summary.json", "unet"]);
    }

    #[test]
    fn state_without_a_data_record_still_loads() {
        let state = State {
            schema_version: STATE_VERSION,
            step: 4,
            epoch: 0,
            samples_seen: 8,
            seed: 0,
            optimizer_step: 4,
            ema_step: 4,
            scaler: None,
            world_size: 1,
            batch_size: 2,
            configured_batch_size: None,
            precision: "fp32".into(),
            last_loss: None,
            config: TrainConfig::preset(crate::choices::Preset::Tiny),
            data: Some(DataSource::Folder {
                path: PathBuf::from("/data/cats"),
            }),
            written_at: 0.0,
        };
        let mut v = serde_json::to_value(&state).unwrap();
        assert_eq!(
            v["data"],
            serde_json::json!({"kind": "folder", "path": "/data/cats"})
        );
        v.as_object_mut().unwrap().remove("data");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), v.to_string()).unwrap();
        let old = read_state(dir.path()).unwrap();
        assert_eq!((old.step, old.data), (4, None));
    }
}
