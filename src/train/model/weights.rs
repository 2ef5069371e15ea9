//! safetensors I/O of model weights (and any named tensors), through the
//! `safetensors` crate.
//!
//! It owns the file format: model state dicts are written in f32 under
//! diffusers' `UNet2DModel` names (loadable by `UNet2DModel.load_state_dict`,
//! `strict=True`), and read strictly: a missing, unexpected or misshapen key
//! is a usage error listing every offender. Files are written atomically
//! (temporary file in the same directory, then rename). It must not know the
//! architecture: the `VarStore` is the reference for names and shapes.
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Context;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use tch::{nn::VarStore, Device, Kind, Tensor};

use super::error::WeightsError;
use super::UNetConfig;

/// Longest list of offending keys an error message spells out per category.
const MAX_LISTED: usize = 12;

fn dtype_of(kind: Kind) -> anyhow::Result<Dtype> {
    Ok(match kind {
        Kind::Float => Dtype::F32,
        Kind::Half => Dtype::F16,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Double => Dtype::F64,
        Kind::Int64 => Dtype::I64,
        Kind::Int => Dtype::I32,
        Kind::Int16 => Dtype::I16,
        Kind::Int8 => Dtype::I8,
        Kind::Uint8 => Dtype::U8,
        Kind::Bool => Dtype::BOOL,
        other => {
            anyhow::bail!("tensors of dtype {other:?} cannot be stored in safetensors by imgctl")
        }
    })
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        Dtype::I16 => Kind::Int16,
        Dtype::I8 => Kind::Int8,
        Dtype::U8 => Kind::Uint8,
        Dtype::BOOL => Kind::Bool,
        _ => return None,
    })
}

/// A tensor's bytes on the host, ready for a [`TensorView`].
struct HostTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl HostTensor {
    fn new(t: &Tensor) -> anyhow::Result<Self> {
        let dtype = dtype_of(t.kind())?;
        let t = t.to_device(Device::Cpu).contiguous();
        let numel = t.numel();
        let mut bytes = vec![0u8; numel * t.kind().elt_size_in_bytes()];
        t.f_copy_data_u8(&mut bytes, numel)?;
        Ok(Self {
            dtype,
            shape: t.size().iter().map(|&d| d as usize).collect(),
            bytes,
        })
    }
}

/// Writes named tensors (any device, the dtypes of [`read_tensors`]) to a
/// safetensors file atomically, with optional string metadata.
pub fn write_tensors(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> anyhow::Result<()> {
    let host: Vec<(String, HostTensor)> = tensors
        .iter()
        .map(|(name, t)| {
            Ok((
                name.clone(),
                HostTensor::new(t).with_context(|| format!("tensor {name}"))?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let views: Vec<(String, TensorView<'_>)> = host
        .iter()
        .map(|(name, h)| {
            TensorView::new(h.dtype, h.shape.clone(), &h.bytes)
                .map(|v| (name.clone(), v))
                .with_context(|| format!("tensor {name}"))
        })
        .collect::<anyhow::Result<_>>()?;
    crate::sys::fs::write_atomic(path, |tmp| {
        safetensors::tensor::serialize_to_file(views, &metadata, tmp).map_err(|e| match e {
            safetensors::SafeTensorError::IoError(e) => e,
            other => std::io::Error::other(format!("{other:?}")),
        })
    })
    .map_err(|error| WeightsError::Write {
        path: path.to_path_buf(),
        error,
    })?;
    Ok(())
}

/// Reads every tensor of a safetensors file onto the CPU, in its stored
/// dtype, sorted by name.
pub fn read_tensors(path: &Path) -> anyhow::Result<Vec<(String, Tensor)>> {
    let bytes = read_file(path)?;
    let st = parse(&bytes, path)?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        out.push((
            name.clone(),
            to_tensor(&view).with_context(|| format!("{}: tensor {name}", path.display()))?,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The string metadata (`__metadata__`) of a safetensors file.
pub fn read_metadata(path: &Path) -> anyhow::Result<HashMap<String, String>> {
    let bytes = read_file(path)?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| not_safetensors(path, e))?;
    Ok(meta.metadata().clone().unwrap_or_default())
}

/// Reads a weights file whole: a regular file no larger than the host's
/// available memory (a FIFO or /dev/zero in its place is refused at once).
fn read_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let max = crate::train::memory::host_available_bytes().unwrap_or(u64::MAX);
    crate::sys::fs::read_regular(path, max).map_err(|error| {
        WeightsError::Read {
            path: path.to_path_buf(),
            error,
        }
        .into()
    })
}

fn not_safetensors(path: &Path, e: safetensors::SafeTensorError) -> anyhow::Error {
    WeightsError::NotSafetensors {
        path: path.to_path_buf(),
        error: format!("{e:?}"),
    }
    .into()
}

fn parse<'a>(bytes: &'a [u8], path: &Path) -> anyhow::Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| not_safetensors(path, e))
}

fn to_tensor(view: &TensorView<'_>) -> anyhow::Result<Tensor> {
    let kind = kind_of(view.dtype())
        .ok_or_else(|| anyhow::anyhow!("unsupported dtype {:?}", view.dtype()))?;
    let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    Ok(Tensor::f_from_data_size(view.data(), &shape, kind)?)
}

/// Saves the model's parameters as a diffusers-compatible state dict: one f32
/// tensor per `VarStore` variable, named as diffusers names it, plus the
/// `{"format": "pt"}` metadata diffusers and transformers write.
pub fn save_safetensors(vs: &VarStore, path: &Path) -> anyhow::Result<()> {
    let vars: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    let tensors: Vec<(String, Tensor)> = vars
        .into_iter()
        .map(|(k, v)| (k, v.detach().to_kind(Kind::Float)))
        .collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    write_tensors(path, &tensors, Some(meta))
}

/// File name of the weights in a diffusers model folder (`save_pretrained`).
pub const DIFFUSERS_WEIGHTS_NAME: &str = "diffusion_pytorch_model.safetensors";
/// File name of the config in a diffusers model folder.
pub const DIFFUSERS_CONFIG_NAME: &str = "config.json";

/// Writes a diffusers model folder: `config.json` and
/// `diffusion_pytorch_model.safetensors`, the layout
/// `UNet2DModel.from_pretrained(dir)` reads. Creates `dir` if needed.
pub fn save_pretrained(vs: &VarStore, cfg: &UNetConfig, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|error| WeightsError::CreateDir {
        path: dir.to_path_buf(),
        error,
    })?;
    save_safetensors(vs, &dir.join(DIFFUSERS_WEIGHTS_NAME))?;
    let json = serde_json::to_string_pretty(&cfg.to_diffusers_json())?;
    let path = dir.join(DIFFUSERS_CONFIG_NAME);
    crate::sys::fs::write_file_atomic(&path, json.as_bytes())
        .map_err(|error| WeightsError::Write { path, error })?;
    Ok(())
}

fn listed(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(MAX_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX_LISTED {
        s.push_str(&format!(", … and {} more", items.len() - MAX_LISTED));
    }
    s
}

/// Loads a diffusers `UNet2DModel` state dict (f32, f16 or bf16) into the
/// model's variables, strictly: every variable must be in the file with the
/// same shape, and the file may hold nothing else. Otherwise nothing is
/// loaded and the usage error lists the missing keys, the unexpected keys
/// and the shape mismatches.
pub fn load_diffusers_state_dict(vs: &VarStore, path: &Path) -> anyhow::Result<()> {
    let bytes = read_file(path)?;
    let st = parse(&bytes, path)?;
    let vars = vs.variables();
    check_matches(&vars, &st, path)?;
    tch::no_grad(|| -> anyhow::Result<()> {
        for (name, var) in &vars {
            let view = st.tensor(name).expect("checked above");
            let src = to_tensor(&view)?;
            let mut dst = var.shallow_clone();
            dst.f_copy_(&src.to_device(dst.device()).to_kind(dst.kind()))?;
        }
        Ok(())
    })
    .with_context(|| format!("loading {}", path.display()))
}

/// Checks that the state dict at `path` loads into a model of `cfg` (every
/// key, shape and a float dtype), without keeping the model: what
/// `--init-from` is checked with before anything is written to `--out`.
pub fn check_diffusers_state_dict(cfg: &UNetConfig, path: &Path) -> anyhow::Result<()> {
    let vs = VarStore::new(tch::Device::Cpu);
    tch::no_grad(|| super::UNet2DModel::try_new(&vs.root(), cfg))?;
    let bytes = read_file(path)?;
    let st = parse(&bytes, path)?;
    check_matches(&vs.variables(), &st, path)
}

/// Every variable of the model in the file with its shape and a float
/// dtype, and nothing else in the file: one [`WeightsError::Mismatch`]
/// listing what differs otherwise.
fn check_matches(
    vars: &HashMap<String, Tensor>,
    st: &SafeTensors<'_>,
    path: &Path,
) -> anyhow::Result<()> {
    let file_names: Vec<String> = st.names().into_iter().cloned().collect();

    let mut missing: Vec<String> = vars
        .keys()
        .filter(|k| st.tensor(k).is_err())
        .cloned()
        .collect();
    let mut unexpected: Vec<String> = file_names
        .iter()
        .filter(|k| !vars.contains_key(*k))
        .cloned()
        .collect();
    let mut mismatched = Vec::new();
    let mut bad_dtype = Vec::new();
    for (name, var) in vars {
        if let Ok(view) = st.tensor(name) {
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if shape != var.size() {
                mismatched.push(format!("{name} (file {:?}, model {:?})", shape, var.size()));
            } else if !matches!(view.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                bad_dtype.push(format!("{name} ({:?})", view.dtype()));
            }
        }
    }
    missing.sort();
    unexpected.sort();
    mismatched.sort();
    bad_dtype.sort();
    if !(missing.is_empty()
        && unexpected.is_empty()
        && mismatched.is_empty()
        && bad_dtype.is_empty())
    {
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!(
                "{} missing key(s): {}",
                missing.len(),
                listed(&missing)
            ));
        }
        if !unexpected.is_empty() {
            parts.push(format!(
                "{} unexpected key(s): {}",
                unexpected.len(),
                listed(&unexpected)
            ));
        }
        if !mismatched.is_empty() {
            parts.push(format!(
                "{} shape mismatch(es): {}",
                mismatched.len(),
                listed(&mismatched)
            ));
        }
        if !bad_dtype.is_empty() {
            parts.push(format!(
                "{} non-float tensor(s): {}",
                bad_dtype.len(),
                listed(&bad_dtype)
            ));
        }
        return Err(WeightsError::Mismatch {
            path: path.to_path_buf(),
            problems: parts.join("; "),
        }
        .into());
    }
    Ok(())
}
