//! The libtorch entry points tch 0.20 does not expose, through our C++ shim
//! `csrc/torch_ext.cpp` (compiled by build.rs against the same libtorch):
//! post-accumulate-grad hooks (the overlapped all-reduce), `pin_memory()`
//! without tch's deprecated device argument, the fused AdamW kernel, the
//! CUDA caching allocator's statistics, TF32 for fp32 matmuls, and the Kineto
//! profiler.
//!
//! Every call passes tch tensors as the `at::Tensor*` they wrap and turns the
//! shim's error string into an `anyhow` error. This module owns the FFI and
//! the checks the C++ side assumes; what the calls are for belongs to their
//! callers.
use std::ffi::{c_char, c_int, c_void, CStr};

use tch::{Kind, Tensor};

/// The callback a gradient hook runs: `(ctx, parameter index)`.
pub type GradReadyFn = unsafe extern "C" fn(ctx: *mut c_void, index: i64);

extern "C" {
    fn imgctl_set_grad_ready_hook(
        tensor: *mut c_void,
        f: GradReadyFn,
        ctx: *mut c_void,
        index: i64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn imgctl_clear_grad_ready_hook(tensor: *mut c_void, err: *mut c_char, err_len: usize)
        -> c_int;
    fn imgctl_pin_memory(
        tensor: *mut c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn imgctl_cuda_memory_stats(
        device: i64,
        reset: c_int,
        out: *mut i64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn imgctl_cuda_matmul_tf32(
        mode: c_int,
        previous: *mut c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn imgctl_profiler_start(cuda: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn imgctl_profiler_stop(path: *const c_char, err: *mut c_char, err_len: usize) -> c_int;
    fn imgctl_fused_adamw(
        param: *mut c_void,
        grad: *mut c_void,
        exp_avg: *mut c_void,
        exp_avg_sq: *mut c_void,
        step: *mut c_void,
        grad_scale: *mut c_void,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

const ERR_LEN: usize = 512;

fn raw(t: &Tensor) -> *mut c_void {
    t.as_ptr() as *mut c_void
}

/// Runs a shim call with an error buffer; a non-zero return becomes an error
/// with the shim's message (its first line).
fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), String> {
    let mut err = [0 as c_char; ERR_LEN];
    if f(err.as_mut_ptr(), ERR_LEN) == 0 {
        return Ok(());
    }
    // SAFETY: on failure the shim wrote a NUL-terminated string into err.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    Err(msg.lines().next().unwrap_or_default().to_string())
}

/// Sets `tensor`'s post-accumulate-grad hook (replacing any earlier one):
/// after each backward pass that reaches it, `f(ctx, index)` runs on the
/// autograd thread. The tensor must be a leaf that requires grad.
///
/// # Safety
/// `ctx` must stay valid for `f` until the hook is cleared
/// ([`clear_grad_ready_hook`]) or the tensor is freed, and `f` must not unwind.
pub unsafe fn set_grad_ready_hook(
    tensor: &Tensor,
    f: GradReadyFn,
    ctx: *mut c_void,
    index: i64,
) -> Result<(), String> {
    // SAFETY: a live tensor; ctx and f as the caller promised.
    call(|err, len| unsafe { imgctl_set_grad_ready_hook(raw(tensor), f, ctx, index, err, len) })
}

/// Removes `tensor`'s post-accumulate-grad hook, if any.
pub fn clear_grad_ready_hook(tensor: &Tensor) -> Result<(), String> {
    // SAFETY: a live tensor; clearing drops the C++ hook object.
    call(|err, len| unsafe { imgctl_clear_grad_ready_hook(raw(tensor), err, len) })
}

/// A copy of the CPU tensor `t` in page-locked memory (torch's pinned-memory
/// cache), for non-blocking copies to a GPU. Fails without CUDA.
pub fn pin_memory(t: &Tensor) -> anyhow::Result<Tensor> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live tensor; on success the shim stores a new heap
    // at::Tensor* in `out`, which tch takes over (and frees) below.
    call(|err, len| unsafe { imgctl_pin_memory(raw(t), &mut out, err, len) })
        .map_err(|why| anyhow::anyhow!("pin_memory failed: {why}"))?;
    // SAFETY: `out` is the tensor the shim allocated with `new`, as tch's own
    // C wrappers allocate theirs.
    Ok(unsafe { Tensor::from_ptr(out as *mut _) })
}

/// The CUDA caching allocator's byte counts for one device, all pools: what
/// `torch.cuda.memory_allocated`/`max_memory_allocated` and their `reserved`
/// twins read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AllocatorStats {
    /// Bytes in tensors now.
    pub allocated_bytes: u64,
    /// The most bytes in tensors at once since the last reset.
    pub peak_allocated_bytes: u64,
    /// Bytes the allocator holds from the device now (in use or cached).
    pub reserved_bytes: u64,
    /// The most bytes it held at once since the last reset.
    pub peak_reserved_bytes: u64,
}

/// Reads torch's [`AllocatorStats`] for CUDA device `device`, then resets the
/// peaks when `reset_peak`. `Ok(None)` when the libtorch this binary runs on
/// predates the device-allocator interface (torch < 2.9, whose allocator class
/// needs the CUDA toolkit's headers to reach).
pub fn cuda_allocator_stats(
    device: usize,
    reset_peak: bool,
) -> Result<Option<AllocatorStats>, String> {
    let mut out = [0i64; 4];
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `out` holds the four values the shim writes; err as in `call`.
    let rc = unsafe {
        imgctl_cuda_memory_stats(
            device as i64,
            c_int::from(reset_peak),
            out.as_mut_ptr(),
            err.as_mut_ptr(),
            ERR_LEN,
        )
    };
    match rc {
        0 => {
            let b = |v: i64| v.max(0) as u64;
            Ok(Some(AllocatorStats {
                allocated_bytes: b(out[0]),
                peak_allocated_bytes: b(out[1]),
                reserved_bytes: b(out[2]),
                peak_reserved_bytes: b(out[3]),
            }))
        }
        -2 => Ok(None),
        _ => {
            // SAFETY: on failure the shim wrote a NUL-terminated string into err.
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
            Err(msg.lines().next().unwrap_or_default().to_string())
        }
    }
}

/// CUDA fp32 matmuls on TF32 tensor cores while this lives
/// (`torch.backends.cuda.matmul.allow_tf32 = True`); the setting before is
/// restored on drop.
#[derive(Debug)]
pub struct Tf32Matmul {
    previous: c_int,
}

impl Tf32Matmul {
    /// Turns TF32 on for CUDA fp32 matmuls.
    pub fn on() -> Result<Self, String> {
        let mut previous: c_int = 0;
        // SAFETY: `previous` is a live int the shim writes; err as in `call`.
        call(|err, len| unsafe { imgctl_cuda_matmul_tf32(1, &mut previous, err, len) })?;
        Ok(Self { previous })
    }
}

impl Drop for Tf32Matmul {
    fn drop(&mut self) {
        let mut ignored: c_int = 0;
        // SAFETY: as in `on`.
        let _ = call(|err, len| unsafe {
            imgctl_cuda_matmul_tf32(self.previous, &mut ignored, err, len)
        });
    }
}

/// Runs `f` under libtorch's Kineto profiler (CPU ops, and CUDA kernels with
/// `cuda`) and writes the Chrome trace (`chrome://tracing`, Perfetto, or
/// `scripts/trace_summary.py`) to `path`.
pub fn profile_to_trace<T>(
    path: &std::path::Path,
    cuda: bool,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| anyhow::anyhow!("the trace path {} holds a NUL byte", path.display()))?;
    // SAFETY: err as in `call`; no pointers are kept.
    call(|err, len| unsafe { imgctl_profiler_start(c_int::from(cuda), err, len) })
        .map_err(|why| anyhow::anyhow!("cannot start libtorch's profiler: {why}"))?;
    let out = f();
    // SAFETY: a NUL-terminated path that outlives the call.
    let stopped = call(|err, len| unsafe { imgctl_profiler_stop(c_path.as_ptr(), err, len) });
    let out = out?;
    stopped.map_err(|why| anyhow::anyhow!("cannot write the trace {}: {why}", path.display()))?;
    Ok(out)
}

/// One `aten::_fused_adamw_` step over single flat tensors: `param`, `grad`,
/// `exp_avg` and `exp_avg_sq` contiguous fp32 of one shape on one device,
/// `step` a one-element fp32 tensor there holding the new step count, and
/// `grad_scale` (optional, one fp32 value there) dividing the gradient first
/// (the divided gradient is written back). Mismatched tensors are an error
/// here, before libtorch's CPU kernel, which trusts them, could read out of
/// bounds; an error from libtorch itself is returned as `Err(Fused(..))`.
#[allow(clippy::too_many_arguments)]
pub fn fused_adamw(
    param: &Tensor,
    grad: &Tensor,
    exp_avg: &Tensor,
    exp_avg_sq: &Tensor,
    step: &Tensor,
    grad_scale: Option<&Tensor>,
    hyper: [f64; 5],
) -> Result<(), FusedError> {
    let bad = |msg: String| Err(FusedError::Inputs(msg));
    if param.kind() != Kind::Float || !param.is_contiguous() {
        return bad(format!(
            "AdamW updates contiguous fp32 parameters, not {:?}",
            param.kind()
        ));
    }
    for (what, t) in [
        ("gradient", grad),
        ("first moment", exp_avg),
        ("second moment", exp_avg_sq),
    ] {
        if t.size() != param.size()
            || t.kind() != param.kind()
            || t.device() != param.device()
            || !t.is_contiguous()
        {
            return bad(format!(
                "AdamW: the {what} ({:?} {:?} on {:?}) does not match the parameters ({:?} {:?} on {:?})",
                t.size(),
                t.kind(),
                t.device(),
                param.size(),
                param.kind(),
                param.device()
            ));
        }
    }
    for (what, t) in [("step", Some(step)), ("gradient divisor", grad_scale)] {
        if let Some(t) = t {
            if t.numel() != 1 || t.kind() != Kind::Float || t.device() != param.device() {
                return bad(format!(
                    "AdamW: the {what} must be one fp32 value on {:?}",
                    param.device()
                ));
            }
        }
    }
    let [lr, beta1, beta2, weight_decay, eps] = hyper;
    // SAFETY: live tensors checked above to be what the kernel assumes.
    call(|err, len| unsafe {
        imgctl_fused_adamw(
            raw(param),
            raw(grad),
            raw(exp_avg),
            raw(exp_avg_sq),
            raw(step),
            grad_scale.map_or(std::ptr::null_mut(), raw),
            lr,
            beta1,
            beta2,
            weight_decay,
            eps,
            err,
            len,
        )
    })
    .map_err(FusedError::Fused)
}

/// Why [`fused_adamw`] did not update.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FusedError {
    /// The tensors do not fit together (a bug of the caller).
    #[error("{0}")]
    Inputs(String),
    /// libtorch's kernel refused or failed (its message).
    #[error("the fused AdamW kernel failed: {0}")]
    Fused(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_toggles_and_restores_without_a_gpu() {
        // Setting libtorch's matmul precision needs no device; the guard
        // restores it, and a second guard sees the restored state.
        let guard = Tf32Matmul::on().expect("turn TF32 on");
        assert_eq!(guard.previous, 0, "fp32 matmuls start in IEEE fp32");
        let inner = Tf32Matmul::on().expect("again");
        assert_eq!(inner.previous, 1, "the outer guard turned it on");
        drop(inner);
        drop(guard);
        let after = Tf32Matmul::on().expect("after");
        assert_eq!(after.previous, 0, "restored on drop");
    }

    #[test]
    fn cuda_allocator_stats_are_unavailable_or_an_error_without_a_gpu() {
        // torch 2.7 (the set-up venv) predates the device-allocator interface:
        // Ok(None). A newer libtorch without a GPU reports an error, never numbers.
        match cuda_allocator_stats(0, false) {
            Ok(None) | Err(_) => {}
            Ok(Some(s)) => panic!("allocator stats without a GPU: {s:?}"),
        }
    }

    #[test]
    fn pin_memory_pins_or_names_why_not() {
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        match pin_memory(&t) {
            // A GPU host: the same values, in page-locked memory.
            Ok(p) => assert_eq!(Vec::<f32>::try_from(&p).unwrap(), vec![1.0, 2.0, 3.0]),
            // No GPU: libtorch's reason in one line, and no crash.
            Err(e) => {
                let e = e.to_string();
                assert!(e.starts_with("pin_memory failed: "), "{e}");
                assert!(!e.contains('\n'), "{e}");
                assert!(!tch::Cuda::is_available());
            }
        }
    }

    #[test]
    fn fused_adamw_refuses_what_the_kernel_would_misread() {
        let p = Tensor::zeros([4], (Kind::Float, tch::Device::Cpu));
        let step = Tensor::ones([], (Kind::Float, tch::Device::Cpu));
        let short = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
        let hyper = [1e-3, 0.9, 0.999, 0.0, 1e-8];
        let err = fused_adamw(
            &p,
            &short,
            &p.zeros_like(),
            &p.zeros_like(),
            &step,
            None,
            hyper,
        )
        .unwrap_err();
        assert!(matches!(err, FusedError::Inputs(_)), "{err}");
        let f64_step = Tensor::ones([], (Kind::Double, tch::Device::Cpu));
        let err = fused_adamw(
            &p,
            &p.zeros_like(),
            &p.zeros_like(),
            &p.zeros_like(),
            &f64_step,
            None,
            hyper,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "AdamW: the step must be one fp32 value on Cpu"
        );
        // Matching tensors update.
        let g = Tensor::ones([4], (Kind::Float, tch::Device::Cpu));
        fused_adamw(&p, &g, &p.zeros_like(), &p.zeros_like(), &step, None, hyper).unwrap();
        assert!(f64::try_from(p.sum(Kind::Float)).unwrap() < 0.0);
    }
}
