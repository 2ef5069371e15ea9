//! The libtorch entry points tch 0.20 does not expose, through our C++ shim
//! `csrc/torch_ext.cpp` (compiled by build.rs against the same libtorch):
//! post-accumulate-grad hooks (the overlapped all-reduce), `pin_memory()`
//! without tch's deprecated device argument, the fused AdamW kernel, the
//! CUDA caching allocator's statistics, TF32 for fp32 matmuls, the Kineto
//! profiler, and activation checkpointing ([`checkpoint`]).
//!
//! Every call passes tch tensors as the `at::Tensor*` they wrap and turns the
//! shim's error string into an `anyhow` error. This module owns the FFI and
//! the checks the C++ side assumes; what the calls are for belongs to their
//! callers.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use tch::{Kind, Tensor};

/// The callback a gradient hook runs: `(ctx, parameter index)`.
type GradReadyFn = unsafe extern "C" fn(ctx: *mut c_void, index: i64);

/// A checkpointed computation, called by the shim: `inputs` are `n` borrowed
/// `at::Tensor*`, each output goes to `imgctl_tensor_vec_push(outputs, ..)`.
type CkptRunFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    inputs: *const *mut c_void,
    n: i64,
    outputs: *mut c_void,
    err: *mut c_char,
    err_len: usize,
) -> c_int;
/// Frees a checkpointed computation's context.
type CkptDropFn = unsafe extern "C" fn(ctx: *mut c_void);
/// Receives one output as a new heap `at::Tensor*`.
type TensorSinkFn = unsafe extern "C" fn(sink: *mut c_void, tensor: *mut c_void);

extern "C" {
    fn imgctl_tensor_vec_push(outputs: *mut c_void, tensor: *mut c_void) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn imgctl_checkpoint(
        run: CkptRunFn,
        drop: CkptDropFn,
        ctx: *mut c_void,
        inputs: *const *mut c_void,
        n_inputs: i64,
        n_args: i64,
        sink: TensorSinkFn,
        sink_ctx: *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
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
unsafe fn set_grad_ready_hook(
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

/// What gradient hooks report to: the index of each parameter whose gradient
/// became final. Called on the autograd thread while backward still runs, so
/// it must be quick; a panic in it is caught (never unwinds into libtorch).
pub trait GradReady: Send + Sync {
    /// Parameter `index`'s gradient is final for this backward pass.
    fn grad_ready(&self, index: usize);
}

unsafe extern "C" fn on_grad_ready<S: GradReady>(ctx: *mut c_void, index: i64) {
    // SAFETY: ctx is the `S` of the `GradReadyHooks` that set this hook,
    // kept alive by its Arc until the hooks are cleared (see `Drop`).
    let sink = unsafe { &*(ctx as *const S) };
    // Never unwind into libtorch's C++ frames.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sink.grad_ready(index as usize);
    }));
}

/// Post-accumulate-grad hooks on a set of tensors, all reporting to one
/// [`GradReady`] sink; each tensor and the sink are kept until the hooks are
/// removed, when this is dropped.
pub struct GradReadyHooks<S: GradReady> {
    sink: Arc<S>,
    tensors: Vec<Tensor>,
}

impl<S: GradReady> GradReadyHooks<S> {
    /// No hooks yet, reporting to `sink`.
    pub fn new(sink: Arc<S>) -> Self {
        Self {
            sink,
            tensors: Vec::new(),
        }
    }

    /// Hooks `tensor` (a leaf that requires grad) to report `index`,
    /// replacing an earlier hook of it; the error is the shim's message.
    pub fn add(&mut self, tensor: Tensor, index: usize) -> Result<(), String> {
        let ctx = Arc::as_ptr(&self.sink) as *mut c_void;
        // SAFETY: ctx (our sink) outlives the hook: `self` keeps the Arc and
        // the tensor until Drop clears the hook; on_grad_ready never unwinds.
        unsafe { set_grad_ready_hook(&tensor, on_grad_ready::<S>, ctx, index as i64) }?;
        self.tensors.push(tensor);
        Ok(())
    }

    /// The sink the hooks report to.
    pub fn sink(&self) -> &Arc<S> {
        &self.sink
    }

    /// How many tensors are hooked.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether no tensor is hooked.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

impl<S: GradReady> Drop for GradReadyHooks<S> {
    fn drop(&mut self) {
        for t in &self.tensors {
            // Clearing drops the C++ hook object, after which nothing refers
            // to our sink; it cannot fail on a live tensor.
            let _ = clear_grad_ready_hook(t);
        }
    }
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

/// On a CPU run Kineto still asks CUDA for its devices and, on a host
/// without any, prints `ERROR: gpuGetDeviceCount failed with code 35`: noise
/// that reads like a failure. Kineto reads its log level when the profiler
/// first starts, so a CPU profile quietens it (`KINETO_LOG_LEVEL=5`) unless
/// the user set a level; on a GPU its errors (CUPTI's permissions among them)
/// are worth seeing. Call it before the run starts its threads (the data
/// loader's): setting the environment while another thread reads it is a
/// data race in C.
pub fn quiet_kineto_for_cpu(cuda: bool) {
    if !cuda && std::env::var_os(crate::env_vars::KINETO_LOG_LEVEL).is_none() {
        std::env::set_var(crate::env_vars::KINETO_LOG_LEVEL, "5");
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

/// Writes `msg` NUL-terminated (cut to fit) into the shim's error buffer.
///
/// # Safety
/// `err` points to `len` writable bytes, or `len` is 0.
unsafe fn write_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let bytes = msg.as_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: n + 1 <= len bytes, as the caller promised.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

/// The shim's call into a checkpointed computation `F` (its context is a
/// `Box<F>`): borrows the inputs as tch tensors, runs `F`, hands the outputs
/// back; a panic becomes an error (it must not unwind into C++).
unsafe extern "C" fn ckpt_run<F>(
    ctx: *mut c_void,
    inputs: *const *mut c_void,
    n: i64,
    outputs: *mut c_void,
    err: *mut c_char,
    err_len: usize,
) -> c_int
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let run = || {
        // SAFETY: ctx is the Box<F> that `checkpoint` leaked; it lives until
        // the shim calls `ckpt_drop`, which it does not do during a call.
        let f = unsafe { &*(ctx as *const F) };
        let args: Vec<Tensor> = (0..n.max(0) as usize)
            // SAFETY: the shim passes n live at::Tensor*; shallow copies
            // (refcounted) are taken, so they need not outlive this call.
            .map(|i| unsafe { Tensor::clone_from_ptr(*inputs.add(i) as *mut _) })
            .collect();
        let outs = f(&args);
        for t in &outs {
            // SAFETY: `outputs` is the shim's std::vector; t is live.
            if unsafe { imgctl_tensor_vec_push(outputs, raw(t)) } != 0 {
                return Err("cannot collect the block's outputs".to_string());
            }
        }
        Ok(())
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            // SAFETY: the shim's buffer of err_len bytes.
            unsafe { write_err(err, err_len, &msg) };
            -1
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            // SAFETY: the shim's buffer of err_len bytes.
            unsafe { write_err(err, err_len, msg) };
            -1
        }
    }
}

/// Frees a checkpointed computation's `Box<F>` (called once by the shim).
unsafe extern "C" fn ckpt_drop<F>(ctx: *mut c_void) {
    // SAFETY: ctx is the Box<F> `checkpoint` leaked, freed only here. A
    // panicking drop (it holds tensors only) must not unwind into C++.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(unsafe { Box::from_raw(ctx as *mut F) })
    }));
}

/// Collects the shim's outputs into a `Vec<Tensor>`.
unsafe extern "C" fn collect_output(sink: *mut c_void, tensor: *mut c_void) {
    // SAFETY: sink is the Vec of `checkpoint`; tensor a new heap at::Tensor*
    // that tch takes over.
    unsafe { (*(sink as *mut Vec<Tensor>)).push(Tensor::from_ptr(tensor as *mut _)) };
}

/// Activation checkpointing (`torch.utils.checkpoint` with
/// `use_reentrant=True, preserve_rng_state=True`): `f(args)` runs without
/// recording a graph, and backward recomputes it (with the RNG and autocast
/// state of the forward, so dropout draws the same mask) to get the
/// gradients of `args` and of `params`, the tensors `f` reads besides its
/// arguments whose gradients are wanted (the block's parameters: their
/// gradients reach their `.grad` through autograd as usual). Only `args`
/// and `params` are saved for backward.
///
/// Without grad mode, or when nothing requires grad, `f` simply runs.
/// `f` must compute the same thing each call (it runs on the autograd
/// thread in backward, hence `Send`); a panic in it becomes an error here or
/// in backward.
pub fn checkpoint<F>(args: &[&Tensor], params: &[Tensor], f: F) -> anyhow::Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Vec<Tensor> + Send + 'static,
{
    let ptrs: Vec<*mut c_void> = args.iter().copied().chain(params.iter()).map(raw).collect();
    let ctx = Box::into_raw(Box::new(f)) as *mut c_void;
    let mut outs: Vec<Tensor> = Vec::new();
    // SAFETY: live tensors; the shim owns ctx from here on and frees it with
    // ckpt_drop::<F> exactly once; `outs` outlives the call.
    call(|err, len| unsafe {
        imgctl_checkpoint(
            ckpt_run::<F>,
            ckpt_drop::<F>,
            ctx,
            ptrs.as_ptr(),
            ptrs.len() as i64,
            args.len() as i64,
            collect_output,
            &mut outs as *mut Vec<Tensor> as *mut c_void,
            err,
            len,
        )
    })
    .map_err(|why| anyhow::anyhow!("checkpointed forward failed: {why}"))?;
    Ok(outs)
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

    /// `dropout(sin(x * w) + b)` as a checkpointable body over `w` and `b`.
    fn body(w: &Tensor, b: &Tensor) -> impl Fn(&[Tensor]) -> Vec<Tensor> + Send + 'static {
        let (w, b) = (w.shallow_clone(), b.shallow_clone());
        move |a: &[Tensor]| {
            let y = (&a[0] * &w).sin() + &b;
            vec![y.dropout(0.5, true), y.cos()]
        }
    }

    /// The two checkpoint tests draw from the global RNG: one at a time.
    static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn leaves() -> (Tensor, Tensor, Tensor) {
        let opts = (Kind::Float, tch::Device::Cpu);
        tch::manual_seed(3);
        let x = Tensor::randn([4, 5], opts).set_requires_grad(true);
        let w = Tensor::randn([5], opts).set_requires_grad(true);
        let b = Tensor::randn([5], opts).set_requires_grad(true);
        (x, w, b)
    }

    #[test]
    fn checkpoint_gives_the_plain_gradients_and_dropout_mask() {
        let _rng = RNG.lock().unwrap_or_else(|e| e.into_inner());
        let run = |ckpt: bool| {
            let (x, w, b) = leaves();
            tch::manual_seed(7);
            let outs = if ckpt {
                checkpoint(&[&x], &[w.shallow_clone(), b.shallow_clone()], body(&w, &b)).unwrap()
            } else {
                body(&w, &b)(&[x.shallow_clone()])
            };
            let loss = (&outs[0] * 2.0 + &outs[1]).sum(Kind::Float);
            loss.backward();
            // The RNG continues as if nothing was recomputed.
            let after = Tensor::rand([3], (Kind::Float, tch::Device::Cpu));
            [outs[0].copy(), x.grad(), w.grad(), b.grad(), after]
                .map(|t| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap())
        };
        assert_eq!(run(true), run(false));
    }

    #[test]
    fn checkpoint_without_grad_just_runs_and_a_panic_is_an_error() {
        let _rng = RNG.lock().unwrap_or_else(|e| e.into_inner());
        let (x, w, b) = leaves();
        let outs = tch::no_grad(|| checkpoint(&[&x], &[w.shallow_clone()], body(&w, &b)).unwrap());
        assert!(!outs[1].requires_grad());
        let err =
            checkpoint(&[&x], &[], |_: &[Tensor]| -> Vec<Tensor> { panic!("boom") }).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        // A panic in the recomputation fails backward with the message.
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = flag.clone();
        let outs = checkpoint(&[&x], &[], move |a: &[Tensor]| {
            if seen.swap(true, std::sync::atomic::Ordering::SeqCst) {
                panic!("second run");
            }
            vec![&a[0] * 2.0]
        })
        .unwrap();
        let err = outs[0].sum(Kind::Float).f_backward().unwrap_err();
        assert!(err.to_string().contains("second run"), "{err}");
    }
}
