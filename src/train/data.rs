//! Training data: the embedded synthetic dataset, image folders, and the
//! background loader that turns them into batches.
//!
//! Owns everything a step consumes from the host side: images as f32 NCHW in
//! [-1, 1], the diffusion noise and the timesteps. All three are a pure
//! function of `(seed, sample position)`, where the position counts samples
//! over the whole run across epochs, so batches do not depend on worker
//! scheduling, on resuming, or on how many ranks share the global batch (rank
//! `r` of `W` takes the `r`-th contiguous block of each global batch). It must
//! not touch tch: the trainer moves batches to the device.
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Number of diffusion timesteps timesteps are drawn from (DDPM, Ho et al. 2020; diffusers' default).
pub const NUM_TRAIN_TIMESTEPS: i64 = 1000;

/// Domain tags keep the random streams derived from one seed independent.
const DOMAIN_SHUFFLE: u64 = 0x5348_5546;
const DOMAIN_ITEM: u64 = 0x4954_454d;
const DOMAIN_SAMPLE: u64 = 0x5341_4d50;
const DOMAIN_TORCH: u64 = 0x544f_5243;

/// SplitMix64 finaliser (Steele et al., "Fast splittable pseudorandom number
/// generators", 2014): mixes counters into well-spread 64-bit seeds.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A generator seeded from `(seed, domain, a, b)` alone.
pub fn derived_rng(seed: u64, domain: u64, a: u64, b: u64) -> ChaCha8Rng {
    let s = splitmix(splitmix(splitmix(seed ^ domain).wrapping_add(a)).wrapping_add(b));
    ChaCha8Rng::seed_from_u64(s)
}

/// The seed of libtorch's global generator for `step` (1-based) on `rank`:
/// what the model itself draws (dropout masks) is then, like the batches, a
/// pure function of the run's position, so a resumed run draws what the
/// uninterrupted one did. Non-negative, as `tch::manual_seed` takes an i64.
pub fn step_torch_seed(seed: u64, step: u64, rank: usize) -> i64 {
    let s = splitmix(
        splitmix(splitmix(seed ^ DOMAIN_TORCH).wrapping_add(step)).wrapping_add(rank as u64),
    );
    (s >> 1) as i64
}

/// Fills `out` with standard normal samples (Box–Muller transform).
pub fn fill_normal(rng: &mut ChaCha8Rng, out: &mut [f32]) {
    let mut i = 0;
    while i < out.len() {
        // u1 in (0, 1] so ln(u1) is finite.
        let u1: f64 = 1.0 - rng.gen::<f64>();
        let u2: f64 = rng.gen::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        out[i] = (r * theta.cos()) as f32;
        if i + 1 < out.len() {
            out[i + 1] = (r * theta.sin()) as f32;
        }
        i += 2;
    }
}

/// What the procedural images look like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyntheticStyle {
    /// A two-colour gradient at a random angle with one to three shapes
    /// (discs, rectangles, triangles) in random colours: varied, for real runs.
    #[default]
    Shapes,
    /// One large disc or square in one of six saturated colours on one of
    /// three dark flat grounds: few modes, learnt in minutes on a CPU (the
    /// smoke preset), and easy to recognise in a sample grid.
    Bold,
}

/// Where images come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Procedural images generated from the seed (no files, no downloads).
    Synthetic {
        /// Number of distinct images in one epoch.
        len: usize,
        /// Their look.
        style: SyntheticStyle,
    },
    /// Image files (PNG/JPEG) found in a folder.
    Folder {
        /// The readable files, sorted by path.
        files: Vec<PathBuf>,
    },
}

/// A dataset of square RGB images at one resolution.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Where the images come from.
    pub source: Source,
    /// Side length of the square images (the model's sample size).
    pub size: u32,
    /// Files skipped while scanning a folder because they could not be read.
    pub skipped: Vec<(PathBuf, String)>,
}

impl Dataset {
    /// The synthetic dataset with `len` images of `size`×`size` in `style`.
    pub fn synthetic(len: usize, size: u32, style: SyntheticStyle) -> Self {
        Self {
            source: Source::Synthetic { len, style },
            size,
            skipped: Vec::new(),
        }
    }

    /// Scans `dir` (not recursively) for PNG and JPEG files whose header
    /// decodes; others are recorded in `skipped`. An error when the folder
    /// cannot be listed.
    pub fn folder(dir: &Path, size: u32) -> std::io::Result<Self> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        let mut files = Vec::new();
        let mut skipped = Vec::new();
        for path in entries {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(|e| e.to_ascii_lowercase())
                .unwrap_or_default();
            if !matches!(ext.as_str(), "png" | "jpg" | "jpeg") {
                continue;
            }
            match probe(&path) {
                Ok(()) => files.push(path),
                Err(e) => skipped.push((path, e)),
            }
        }
        Ok(Self {
            source: Source::Folder { files },
            size,
            skipped,
        })
    }

    /// Number of images in one epoch.
    pub fn len(&self) -> usize {
        match &self.source {
            Source::Synthetic { len, .. } => *len,
            Source::Folder { files } => files.len(),
        }
    }

    /// Whether there is no image at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Image `index` as f32 CHW in [-1, 1] (before augmentation). Errors name the file.
    pub fn image(&self, seed: u64, index: usize) -> Result<Vec<f32>, String> {
        match &self.source {
            Source::Synthetic {
                style: SyntheticStyle::Shapes,
                ..
            } => Ok(synthetic_image(seed, index as u64, self.size)),
            Source::Synthetic {
                style: SyntheticStyle::Bold,
                ..
            } => Ok(bold_image(seed, index as u64, self.size)),
            Source::Folder { files } => load_image(&files[index], self.size),
        }
    }
}

/// An image reader over the regular file `path`: a FIFO or device put in
/// its place (also mid-run) is an error, never a read that blocks forever.
fn open_image(
    path: &Path,
) -> Result<image::ImageReader<std::io::BufReader<std::fs::File>>, String> {
    crate::sys::fs::open_regular(path)
        .map(|f| image::ImageReader::new(std::io::BufReader::new(f)))
        .map_err(|e| e.to_string())
}

/// Checks that a file's format is known and its header decodes.
fn probe(path: &Path) -> Result<(), String> {
    open_image(path)?
        .with_guessed_format()
        .map_err(|e| e.to_string())?
        .into_dimensions()
        .map_err(|e| e.to_string())
        .and_then(|(w, h)| {
            if w == 0 || h == 0 {
                Err("image has no pixels".to_string())
            } else {
                Ok(())
            }
        })
}

/// Decodes, resizes the shorter side to `size` and center-crops to
/// `size`×`size` (torchvision `Resize` + `CenterCrop`, as in diffusers'
/// train_unconditional.py), as f32 CHW in [-1, 1].
pub fn load_image(path: &Path, size: u32) -> Result<Vec<f32>, String> {
    let img = open_image(path)?
        .with_guessed_format()
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())?;
    let img = img
        .resize_to_fill(size, size, image::imageops::FilterType::Triangle)
        .to_rgb8();
    let n = (size * size) as usize;
    let mut out = vec![0f32; 3 * n];
    for (i, px) in img.pixels().enumerate() {
        for c in 0..3 {
            out[c * n + i] = px.0[c] as f32 / 127.5 - 1.0;
        }
    }
    Ok(out)
}

/// A procedural image: a two-colour linear gradient at a random angle with one
/// to three filled shapes (discs, rectangles, triangles) in random colours.
pub fn synthetic_image(seed: u64, index: u64, size: u32) -> Vec<f32> {
    let mut rng = derived_rng(seed, DOMAIN_ITEM, index, 0);
    let s = size as usize;
    let n = s * s;
    let mut out = vec![0f32; 3 * n];
    let c0: [f32; 3] = [rng.gen(), rng.gen(), rng.gen()];
    let c1: [f32; 3] = [rng.gen(), rng.gen(), rng.gen()];
    let angle: f32 = rng.gen::<f32>() * std::f32::consts::TAU;
    let (dx, dy) = (angle.cos(), angle.sin());
    for y in 0..s {
        for x in 0..s {
            let u = (x as f32 + 0.5) / s as f32 - 0.5;
            let v = (y as f32 + 0.5) / s as f32 - 0.5;
            let t = ((u * dx + v * dy) / std::f32::consts::SQRT_2 + 0.5).clamp(0.0, 1.0);
            for c in 0..3 {
                out[c * n + y * s + x] = c0[c] + (c1[c] - c0[c]) * t;
            }
        }
    }
    let shapes = rng.gen_range(1..=3);
    for _ in 0..shapes {
        let kind = rng.gen_range(0..3);
        let colour: [f32; 3] = [rng.gen(), rng.gen(), rng.gen()];
        let cx: f32 = rng.gen_range(0.2..0.8);
        let cy: f32 = rng.gen_range(0.2..0.8);
        let r: f32 = rng.gen_range(0.1..0.3);
        let h: f32 = rng.gen_range(0.1..0.3);
        for y in 0..s {
            for x in 0..s {
                let u = (x as f32 + 0.5) / s as f32;
                let v = (y as f32 + 0.5) / s as f32;
                let inside = match kind {
                    0 => (u - cx).powi(2) + (v - cy).powi(2) <= r * r,
                    1 => (u - cx).abs() <= r && (v - cy).abs() <= h,
                    _ => {
                        // Upward triangle: apex at (cx, cy - h), base at cy + h.
                        let t = (v - (cy - h)) / (2.0 * h);
                        (0.0..=1.0).contains(&t) && (u - cx).abs() <= r * t
                    }
                };
                if inside {
                    for c in 0..3 {
                        out[c * n + y * s + x] = colour[c];
                    }
                }
            }
        }
    }
    for v in &mut out {
        *v = *v * 2.0 - 1.0;
    }
    out
}

/// A procedural image of the `bold` style: one large disc or square, centred
/// near the middle, in one of six saturated colours, on one of three dark
/// flat grounds, in [-1, 1].
pub fn bold_image(seed: u64, index: u64, size: u32) -> Vec<f32> {
    const GROUNDS: [[f32; 3]; 3] = [[0.08, 0.10, 0.25], [0.06, 0.20, 0.10], [0.15, 0.15, 0.15]];
    const COLOURS: [[f32; 3]; 6] = [
        [0.95, 0.15, 0.10],
        [0.98, 0.85, 0.10],
        [0.10, 0.80, 0.95],
        [0.90, 0.20, 0.85],
        [0.20, 0.90, 0.25],
        [1.00, 0.55, 0.05],
    ];
    let mut rng = derived_rng(seed, DOMAIN_ITEM, index, 1);
    let s = size as usize;
    let n = s * s;
    let ground = GROUNDS[rng.gen_range(0..GROUNDS.len())];
    let colour = COLOURS[rng.gen_range(0..COLOURS.len())];
    let disc = rng.gen_bool(0.5);
    let cx: f32 = rng.gen_range(0.38..0.62);
    let cy: f32 = rng.gen_range(0.38..0.62);
    let r: f32 = rng.gen_range(0.22..0.32);
    let mut out = vec![0f32; 3 * n];
    for y in 0..s {
        for x in 0..s {
            let u = (x as f32 + 0.5) / s as f32;
            let v = (y as f32 + 0.5) / s as f32;
            let inside = if disc {
                (u - cx).powi(2) + (v - cy).powi(2) <= r * r
            } else {
                (u - cx).abs() <= r * 0.85 && (v - cy).abs() <= r * 0.85
            };
            let c = if inside { colour } else { ground };
            for (k, value) in c.iter().enumerate() {
                out[k * n + y * s + x] = value * 2.0 - 1.0;
            }
        }
    }
    out
}

/// Flips a CHW image left-right in place.
fn hflip(img: &mut [f32], size: usize) {
    for row in img.chunks_mut(size) {
        row.reverse();
    }
}

/// The permutation of `0..len` used in `epoch` (Fisher–Yates on a derived generator).
pub fn epoch_permutation(seed: u64, epoch: u64, len: usize) -> Vec<usize> {
    let mut rng = derived_rng(seed, DOMAIN_SHUFFLE, epoch, 0);
    let mut perm: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = rng.gen_range(0..=i);
        perm.swap(i, j);
    }
    perm
}

/// One batch for one rank.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Images, f32 NCHW in [-1, 1], flattened.
    pub images: Vec<f32>,
    /// Standard normal noise of the same shape.
    pub noise: Vec<f32>,
    /// Diffusion timesteps in `0..NUM_TRAIN_TIMESTEPS`, one per image.
    pub timesteps: Vec<i64>,
    /// Number of images.
    pub batch: usize,
    /// Image side length.
    pub size: usize,
    /// Dataset items this batch skipped because they failed to decode.
    pub skipped: Vec<(PathBuf, String)>,
    /// Global position of the first sample of the whole global batch.
    pub first_position: u64,
}

/// What identifies a stream of batches.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// The run's seed.
    pub seed: u64,
    /// Images per rank per step.
    pub batch_size: usize,
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks sharing a global batch.
    pub world_size: usize,
    /// Global sample position at which the stream starts (samples consumed so far).
    pub start_position: u64,
}

/// Builds local batch `k` (0-based from the stream start) for a rank.
pub fn build_batch(data: &Dataset, spec: &StreamSpec, k: u64, cache: &mut PermCache) -> Batch {
    let global = (spec.batch_size * spec.world_size) as u64;
    let first_position = spec.start_position + k * global;
    let mine = first_position + (spec.rank * spec.batch_size) as u64;
    let size = data.size as usize;
    let per = 3 * size * size;
    let mut images = Vec::with_capacity(spec.batch_size * per);
    let mut noise = vec![0f32; spec.batch_size * per];
    let mut timesteps = Vec::with_capacity(spec.batch_size);
    let mut skipped = Vec::new();
    let len = data.len();
    for j in 0..spec.batch_size {
        let pos = mine + j as u64;
        let epoch = pos / len as u64;
        let slot = (pos % len as u64) as usize;
        let perm = cache.get(spec.seed, epoch, len);
        // An unreadable file is replaced by the next item of the epoch order,
        // so the batch stays full and deterministic.
        let mut img = None;
        for probe in 0..len {
            let index = perm[(slot + probe) % len];
            match data.image(spec.seed, index) {
                Ok(v) => {
                    img = Some(v);
                    break;
                }
                Err(e) => {
                    if let Source::Folder { files } = &data.source {
                        skipped.push((files[index].clone(), e));
                    }
                }
            }
        }
        // Every file failing after the header probe leaves black images (counted as skipped).
        let mut img = img.unwrap_or_else(|| vec![-1.0; per]);
        let mut rng = derived_rng(spec.seed, DOMAIN_SAMPLE, pos, 0);
        if rng.gen::<bool>() {
            hflip(&mut img, size);
        }
        timesteps.push(rng.gen_range(0..NUM_TRAIN_TIMESTEPS));
        fill_normal(&mut rng, &mut noise[j * per..(j + 1) * per]);
        images.extend_from_slice(&img);
    }
    Batch {
        images,
        noise,
        timesteps,
        batch: spec.batch_size,
        size,
        skipped,
        first_position,
    }
}

/// Remembers the last epoch permutation computed (epochs change rarely).
#[derive(Debug, Default)]
pub struct PermCache {
    epoch: Option<u64>,
    perm: Vec<usize>,
}

impl PermCache {
    fn get(&mut self, seed: u64, epoch: u64, len: usize) -> &[usize] {
        if self.epoch != Some(epoch) || self.perm.len() != len {
            self.perm = epoch_permutation(seed, epoch, len);
            self.epoch = Some(epoch);
        }
        &self.perm
    }
}

/// Background workers producing batches in order through bounded queues.
///
/// Worker `w` of `n` builds local batches `k ≡ w (mod n)` and sends them on
/// its own `sync_channel(prefetch)`; the consumer reads them round-robin, so
/// batches arrive in order while at most `n × prefetch` wait in memory.
pub struct Loader {
    receivers: Vec<Receiver<Batch>>,
    handles: Vec<JoinHandle<()>>,
    next: u64,
    skipped: std::collections::BTreeMap<PathBuf, String>,
}

impl Loader {
    /// Starts `workers` threads (at least one) with `prefetch` batches of queue each.
    pub fn start(data: Arc<Dataset>, spec: StreamSpec, workers: usize, prefetch: usize) -> Self {
        let workers = workers.max(1);
        let mut receivers = Vec::new();
        let mut handles = Vec::new();
        for w in 0..workers {
            let (tx, rx) = sync_channel::<Batch>(prefetch.max(1));
            let data = data.clone();
            let handle = std::thread::Builder::new()
                .name(format!("imgctl-data-{w}"))
                .spawn(move || {
                    let mut cache = PermCache::default();
                    let mut k = w as u64;
                    loop {
                        let batch = build_batch(&data, &spec, k, &mut cache);
                        if tx.send(batch).is_err() {
                            return;
                        }
                        k += workers as u64;
                    }
                })
                .expect("spawn data worker thread");
            receivers.push(rx);
            handles.push(handle);
        }
        Self {
            receivers,
            handles,
            next: 0,
            skipped: Default::default(),
        }
    }

    /// The next batch, in order. `None` only when a worker died.
    pub fn next_batch(&mut self) -> Option<Batch> {
        let w = (self.next % self.receivers.len() as u64) as usize;
        let batch = self.receivers[w].recv().ok()?;
        self.next += 1;
        for (path, why) in &batch.skipped {
            self.skipped.insert(path.clone(), why.clone());
        }
        Some(batch)
    }

    /// Distinct files that failed to decode so far, with the reason.
    pub fn skipped(&self) -> &std::collections::BTreeMap<PathBuf, String> {
        &self.skipped
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Dropping the receivers makes every blocked `send` fail, ending the workers.
        self.receivers.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rank: usize, world: usize, batch: usize) -> StreamSpec {
        StreamSpec {
            seed: 7,
            batch_size: batch,
            rank,
            world_size: world,
            start_position: 0,
        }
    }

    #[test]
    fn step_torch_seeds_differ_by_seed_step_and_rank() {
        let s = step_torch_seed(7, 3, 0);
        assert!(s >= 0);
        assert_eq!(s, step_torch_seed(7, 3, 0));
        let others = [
            step_torch_seed(8, 3, 0),
            step_torch_seed(7, 4, 0),
            step_torch_seed(7, 3, 1),
        ];
        assert!(others.iter().all(|&o| o != s && o >= 0), "{s} {others:?}");
    }

    #[test]
    fn synthetic_images_are_deterministic_and_in_range() {
        let a = synthetic_image(1, 3, 16);
        let b = synthetic_image(1, 3, 16);
        let c = synthetic_image(1, 4, 16);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 3 * 16 * 16);
        assert!(a.iter().all(|v| (-1.0..=1.0).contains(v)));
    }

    #[test]
    fn ranks_split_the_global_batch() {
        let data = Dataset::synthetic(10, 8, SyntheticStyle::Shapes);
        let mut cache = PermCache::default();
        let whole = build_batch(&data, &spec(0, 1, 4), 1, &mut cache);
        let r0 = build_batch(&data, &spec(0, 2, 2), 1, &mut cache);
        let r1 = build_batch(&data, &spec(1, 2, 2), 1, &mut cache);
        let per = 3 * 8 * 8;
        assert_eq!(&whole.images[..2 * per], &r0.images[..]);
        assert_eq!(&whole.images[2 * per..], &r1.images[..]);
        assert_eq!(&whole.noise[2 * per..], &r1.noise[..]);
        assert_eq!(&whole.timesteps[..2], &r0.timesteps[..]);
    }

    #[test]
    fn loader_order_does_not_depend_on_workers() {
        let data = Arc::new(Dataset::synthetic(5, 8, SyntheticStyle::Shapes));
        let mut one = Loader::start(data.clone(), spec(0, 1, 3), 1, 2);
        let mut three = Loader::start(data, spec(0, 1, 3), 3, 1);
        for _ in 0..7 {
            let a = one.next_batch().unwrap();
            let b = three.next_batch().unwrap();
            assert_eq!(a.images, b.images);
            assert_eq!(a.noise, b.noise);
            assert_eq!(a.timesteps, b.timesteps);
        }
    }

    #[test]
    fn epochs_cover_every_item_once() {
        let p = epoch_permutation(3, 2, 50);
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
        assert_ne!(p, epoch_permutation(3, 3, 50));
    }

    #[test]
    fn normal_samples_have_unit_variance() {
        let mut rng = derived_rng(0, 1, 2, 3);
        let mut v = vec![0f32; 20000];
        fill_normal(&mut rng, &mut v);
        let mean = v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "var {var}");
    }
}
