//! imgctl's fused GroupNorm (+ SiLU) for channels-last activations
//! (`group_norm_silu.cu`): compiled at run time by NVRTC for the device's
//! exact architecture, launched through the CUDA driver on torch's current
//! stream, wired into autograd as one node ([`crate::sys::torch_fn`]).
//!
//! [`GnSilu`] is the operation (groups, eps, whether SiLU follows). On a
//! CUDA tensor it runs the kernels; on a CPU tensor it runs the CPU replay
//! of the same arithmetic ([`super::reference`]), so the autograd wiring and
//! the self-check are tested without a GPU. [`prepare`] compiles and
//! self-checks the kernels for a device and dtype before first use; only a
//! passed check makes [`ready`] true. Which layer uses it, and what a failed
//! check prints, belong to the model and the run.
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tch::{Device, Kind, Tensor};

use super::reference::{self, Shape};
use crate::sys::cuda_driver::{CudaDriver, Kernel, KernelArg};
use crate::sys::nvrtc::{Image, Nvrtc};
use crate::sys::torch_fn::{self, CustomFn};

/// The kernels' source.
pub const SOURCE: &str = include_str!("group_norm_silu.cu");
/// The kernels, in launch order.
pub const KERNELS: [&str; 5] = [
    "gn_stats",
    "gn_fwd",
    "gn_bwd_sums",
    "gn_bwd_reduce",
    "gn_bwd_dx",
];
/// Most channels per group (one block's threads hold a group's channels).
pub const MAX_CHANNELS_PER_GROUP: i64 = reference::MAX_THREADS as i64;

/// The `-DIMGCTL_T` code of an activation dtype the kernels take.
pub fn type_code(kind: Kind) -> Option<i32> {
    match kind {
        Kind::Float => Some(0),
        Kind::BFloat16 => Some(1),
        Kind::Half => Some(2),
        _ => None,
    }
}

/// NVRTC options for `sm_{arch}` machine code and element type `code`.
pub fn compile_options(arch: i32, code: i32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{arch}"),
        format!("-DIMGCTL_T={code}"),
        "--std=c++17".into(),
    ]
}

/// Compiles [`SOURCE`] for `sm_{arch}` and activations of `kind`.
pub fn compile(nvrtc: &Nvrtc, arch: i32, kind: Kind) -> Result<Image, String> {
    let code = type_code(kind).ok_or_else(|| format!("no fused GroupNorm for {kind:?}"))?;
    nvrtc.compile(SOURCE, "group_norm_silu.cu", &compile_options(arch, code))
}

struct CudaKernels {
    driver: &'static CudaDriver,
    f: [Kernel; 5],
}

fn driver() -> Result<&'static CudaDriver, String> {
    static D: OnceLock<Result<CudaDriver, String>> = OnceLock::new();
    D.get_or_init(CudaDriver::load)
        .as_ref()
        .map_err(Clone::clone)
}

fn nvrtc() -> Result<&'static Nvrtc, String> {
    static N: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    N.get_or_init(Nvrtc::locate).as_ref().map_err(Clone::clone)
}

type KernelMap = HashMap<(usize, i32), Result<&'static CudaKernels, String>>;
/// Per (device, type code): whether the kernels passed their self-check.
type CheckedMap = HashMap<(usize, i32), bool>;
type Registry = Mutex<(KernelMap, CheckedMap)>;
type OpMap = Mutex<HashMap<(i64, u64, bool), &'static GnSilu>>;

/// Compiled kernels per (device, type code), and whether each passed its
/// self-check.
fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn load_kernels(device: usize, kind: Kind) -> Result<&'static CudaKernels, String> {
    let driver = driver()?;
    let ((major, minor), _sms) = driver.device_info(device as i32)?;
    let nvrtc = nvrtc()?;
    let image = compile(nvrtc, major * 10 + minor, kind)
        .map_err(|e| format!("NVRTC {}: {e}", nvrtc.path().display()))?;
    let module = driver.load_module(device as i32, image.bytes())?;
    let mut f = Vec::new();
    for name in KERNELS {
        f.push(driver.function(&module, name)?);
    }
    let f: [Kernel; 5] = f.try_into().map_err(|_| "kernel count")?;
    Ok(Box::leak(Box::new(CudaKernels { driver, f })))
}

fn kernels(device: usize, kind: Kind) -> Result<&'static CudaKernels, String> {
    let code = type_code(kind).ok_or_else(|| format!("no fused GroupNorm for {kind:?}"))?;
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    reg.0
        .entry((device, code))
        .or_insert_with(|| load_kernels(device, kind))
        .clone()
}

/// Whether the fused kernels for `device` and `kind` passed their
/// self-check ([`prepare`]); always false on the CPU.
pub fn ready(device: Device, kind: Kind) -> bool {
    let (Device::Cuda(i), Some(code)) = (device, type_code(kind)) else {
        return false;
    };
    let reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    reg.1.get(&(i, code)).copied().unwrap_or(false)
}

/// One fused GroupNorm (+ SiLU) configuration; `'static`, one per distinct
/// (groups, eps, act) in the process ([`op`]).
#[derive(Debug)]
pub struct GnSilu {
    groups: i64,
    eps: f64,
    act: bool,
}

/// The operation for `groups` groups, `eps`, and SiLU after it when `act`.
pub fn op(groups: i64, eps: f64, act: bool) -> &'static GnSilu {
    static OPS: OnceLock<OpMap> = OnceLock::new();
    let mut ops = OPS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    ops.entry((groups, eps.to_bits(), act))
        .or_insert_with(|| Box::leak(Box::new(GnSilu { groups, eps, act })))
}

fn channels_last(x: &Tensor) -> bool {
    x.dim() == 4 && x.permute([0, 2, 3, 1]).is_contiguous()
}

fn to_nhwc(x: &Tensor) -> Tensor {
    x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

fn f32s(t: &Tensor) -> Result<Vec<f32>, String> {
    Vec::<f32>::try_from(&t.to_kind(Kind::Float).contiguous().flatten(0, -1))
        .map_err(|e| e.to_string())
}

impl GnSilu {
    /// Why `x` cannot take this operation (`None`: it can): a 4-D tensor
    /// whose channels split into groups of at most
    /// [`MAX_CHANNELS_PER_GROUP`]; on CUDA also channels-last and fp32,
    /// bf16 or fp16.
    pub fn refuses(&self, x: &Tensor) -> Option<String> {
        let size = x.size();
        if size.len() != 4 {
            return Some(format!("a {}-D input, not [N, C, H, W]", size.len()));
        }
        let c = size[1];
        if self.groups <= 0 || c % self.groups != 0 || c / self.groups > MAX_CHANNELS_PER_GROUP {
            return Some(format!("{c} channels in {} groups", self.groups));
        }
        if x.device().is_cuda() {
            if size[0] > MAX_BATCH {
                return Some(format!("a batch of {} (at most {MAX_BATCH})", size[0]));
            }
            if type_code(x.kind()).is_none() {
                return Some(format!("{:?} activations", x.kind()));
            }
            if !channels_last(x) {
                return Some("an input not in channels-last layout".into());
            }
        }
        None
    }

    /// `[silu](group_norm(x) * gamma + beta)`, differentiable in all three;
    /// gamma and beta (`[C]`, any float dtype) are used in fp32.
    pub fn apply(
        &'static self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
    ) -> Result<Tensor, String> {
        if let Some(why) = self.refuses(x) {
            return Err(format!("fused GroupNorm refuses {why}"));
        }
        let g = gamma.to_kind(Kind::Float);
        let b = beta.to_kind(Kind::Float);
        Ok(torch_fn::apply(self, &[x, &g, &b])?.remove(0))
    }

    fn shape(&self, x: &Tensor) -> Shape {
        let s = x.size();
        Shape {
            n: s[0] as usize,
            hw: (s[2] * s[3]) as usize,
            c: s[1] as usize,
            groups: self.groups as usize,
        }
    }

    fn cpu_forward(
        &self,
        x: &Tensor,
        ga: &Tensor,
        be: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor), String> {
        let s = self.shape(x);
        let xv = f32s(&x.permute([0, 2, 3, 1]))?;
        let (m, r) = reference::stats(&xv, s, self.eps as f32);
        let y = reference::forward(&xv, &m, &r, &f32s(ga)?, &f32s(be)?, s, self.act);
        let sz = x.size();
        let y = Tensor::from_slice(&y)
            .view([sz[0], sz[2], sz[3], sz[1]])
            .permute([0, 3, 1, 2])
            .to_kind(x.kind());
        let ng = [s.n as i64, self.groups];
        Ok((
            y,
            Tensor::from_slice(&m).view(ng),
            Tensor::from_slice(&r).view(ng),
        ))
    }

    fn cuda_forward(
        &self,
        x: &Tensor,
        ga: &Tensor,
        be: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor), String> {
        let Device::Cuda(dev) = x.device() else {
            return Err("not a CUDA tensor".into());
        };
        let k = kernels(dev, x.kind())?;
        let s = self.shape(x);
        let opts = (Kind::Float, x.device());
        let mean = Tensor::empty([s.n as i64, self.groups], opts);
        let rstd = Tensor::empty([s.n as i64, self.groups], opts);
        let y = to_nhwc(&x.empty_like());
        let stream = torch_fn::current_cuda_stream(dev)?;
        let (cg, by) = s.block();
        let p = |t: &Tensor| KernelArg::Ptr(t.data_ptr() as u64);
        let i = |v: usize| KernelArg::I32(v as i32);
        k.driver.launch(
            k.f[0],
            [(s.n * s.groups) as u32, 1, 1],
            [cg as u32, by as u32, 1],
            0,
            stream,
            &[
                p(x),
                p(&mean),
                p(&rstd),
                i(s.hw),
                i(s.c),
                i(cg),
                KernelArg::F32(self.eps as f32),
            ],
        )?;
        k.driver.launch(
            k.f[1],
            elementwise_grid(s),
            ELEMENTWISE_BLOCK,
            0,
            stream,
            &[
                p(x),
                p(&mean),
                p(&rstd),
                p(ga),
                p(be),
                p(&y),
                i(s.hw),
                i(s.c),
                i(cg),
                i(self.act as usize),
            ],
        )?;
        Ok((y, mean, rstd))
    }

    #[allow(clippy::too_many_arguments)]
    fn cuda_backward(
        &self,
        x: &Tensor,
        dy: &Tensor,
        ga: &Tensor,
        be: &Tensor,
        mean: &Tensor,
        rstd: &Tensor,
    ) -> Result<[Tensor; 3], String> {
        let Device::Cuda(dev) = x.device() else {
            return Err("not a CUDA tensor".into());
        };
        let k = kernels(dev, x.kind())?;
        let s = self.shape(x);
        let dy = to_nhwc(&dy.to_kind(x.kind()));
        let opts = (Kind::Float, x.device());
        let nc = [(s.n * s.c) as i64];
        let (sum_dz, sum_dzxh) = (Tensor::empty(nc, opts), Tensor::empty(nc, opts));
        let (dgamma, dbeta) = (
            Tensor::empty([s.c as i64], opts),
            Tensor::empty([s.c as i64], opts),
        );
        let ng = [(s.n * s.groups) as i64];
        let (ca, cb) = (Tensor::empty(ng, opts), Tensor::empty(ng, opts));
        let dx = to_nhwc(&x.empty_like());
        let stream = torch_fn::current_cuda_stream(dev)?;
        let (cg, by) = s.block();
        let p = |t: &Tensor| KernelArg::Ptr(t.data_ptr() as u64);
        let i = |v: usize| KernelArg::I32(v as i32);
        let act = i(self.act as usize);
        k.driver.launch(
            k.f[2],
            [(s.n * s.groups) as u32, 1, 1],
            [cg as u32, by as u32, 1],
            0,
            stream,
            &[
                p(x),
                p(&dy),
                p(mean),
                p(rstd),
                p(ga),
                p(be),
                p(&sum_dz),
                p(&sum_dzxh),
                i(s.hw),
                i(s.c),
                i(cg),
                act,
            ],
        )?;
        let threads = s.c + s.n * s.groups;
        k.driver.launch(
            k.f[3],
            [threads.div_ceil(256) as u32, 1, 1],
            [256, 1, 1],
            0,
            stream,
            &[
                p(&sum_dz),
                p(&sum_dzxh),
                p(ga),
                p(&dgamma),
                p(&dbeta),
                p(&ca),
                p(&cb),
                i(s.n),
                i(s.c),
                i(cg),
                KernelArg::F32(1.0 / (s.hw * cg) as f32),
            ],
        )?;
        k.driver.launch(
            k.f[4],
            elementwise_grid(s),
            ELEMENTWISE_BLOCK,
            0,
            stream,
            &[
                p(x),
                p(&dy),
                p(mean),
                p(rstd),
                p(ga),
                p(be),
                p(&ca),
                p(&cb),
                p(&dx),
                i(s.hw),
                i(s.c),
                i(cg),
                act,
            ],
        )?;
        Ok([dx, dgamma, dbeta])
    }
}

/// The elementwise kernels' block: 32 channels by 8 pixels.
pub const ELEMENTWISE_BLOCK: [u32; 3] = [32, 8, 1];
/// Most images a launch takes (the grid's z extent).
pub const MAX_BATCH: i64 = 65_535;

/// The elementwise kernels' grid: channel blocks, pixel blocks (capped,
/// the kernels stride over the rest), images.
pub fn elementwise_grid(s: Shape) -> [u32; 3] {
    let [bx, by, _] = ELEMENTWISE_BLOCK;
    [
        (s.c as u32).div_ceil(bx),
        (s.hw as u32).div_ceil(by).clamp(1, 65_535),
        s.n as u32,
    ]
}

impl CustomFn for GnSilu {
    fn forward(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), String> {
        let [x, ga, be] = inputs else {
            return Err(format!(
                "fused GroupNorm takes 3 inputs, got {}",
                inputs.len()
            ));
        };
        let (x, ga, be) = (
            x.detach(),
            ga.detach().contiguous(),
            be.detach().contiguous(),
        );
        let (y, mean, rstd) = if x.device().is_cuda() {
            self.cuda_forward(&x, &ga, &be)?
        } else {
            self.cpu_forward(&x, &ga, &be)?
        };
        Ok((vec![y], vec![x, ga, be, mean, rstd]))
    }

    fn backward(&self, saved: &[Tensor], grads: &[Tensor]) -> Result<Vec<Option<Tensor>>, String> {
        let ([x, ga, be, mean, rstd], [dy]) = (saved, grads) else {
            return Err("fused GroupNorm backward: unexpected saved tensors".into());
        };
        if x.device().is_cuda() {
            let [dx, dg, db] = self.cuda_backward(x, dy, ga, be, mean, rstd)?;
            return Ok(vec![Some(dx), Some(dg), Some(db)]);
        }
        let s = self.shape(x);
        let nhwc = |t: &Tensor| f32s(&t.permute([0, 2, 3, 1]));
        let g = reference::backward(
            &nhwc(x)?,
            &nhwc(dy)?,
            &f32s(mean)?,
            &f32s(rstd)?,
            &f32s(ga)?,
            &f32s(be)?,
            s,
            self.act,
        );
        let sz = x.size();
        let dx = Tensor::from_slice(&g.dx)
            .view([sz[0], sz[2], sz[3], sz[1]])
            .permute([0, 3, 1, 2])
            .to_kind(x.kind());
        Ok(vec![
            Some(dx),
            Some(Tensor::from_slice(&g.dgamma)),
            Some(Tensor::from_slice(&g.dbeta)),
        ])
    }
}

/// Records that the kernels for (`device`, `kind`) passed their self-check
/// (only [`super::self_check`] calls it).
pub(super) fn mark_checked(device: usize, kind: Kind, passed: bool) {
    if let Some(code) = type_code(kind) {
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        reg.1.insert((device, code), passed);
    }
}

/// The layout the kernels take: `x` as channels-last (a copy unless it is).
pub fn channels_last_copy(x: &Tensor) -> Tensor {
    to_nhwc(x)
}
