//! Autograd functions whose forward and backward are Rust code (tch 0.20
//! has none), and torch's current CUDA stream, through `csrc/torch_fn.cpp`:
//! how imgctl's own kernels ([`super::cuda_driver`]) join a training step.
//!
//! A [`CustomFn`] is `'static` (one per process: its compiled kernels), so
//! the shim keeps a plain pointer to it in the graph. Owns the FFI and the
//! conversion of borrowed `at::Tensor*` to tch tensors; what the function
//! computes belongs to its implementer.
use std::ffi::{c_char, c_int, c_void, CStr};

use tch::Tensor;

type FwdFn = unsafe extern "C" fn(
    *mut c_void,
    *const *mut c_void,
    i64,
    *mut c_void,
    *mut c_void,
    *mut c_char,
    usize,
) -> c_int;
type BwdFn = unsafe extern "C" fn(
    *mut c_void,
    *const *mut c_void,
    i64,
    *const *mut c_void,
    i64,
    *mut c_void,
    *mut c_char,
    usize,
) -> c_int;
type SinkFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

extern "C" {
    fn imgctl_tensor_vec_push(outputs: *mut c_void, tensor: *mut c_void) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn imgctl_custom_function(
        fwd: FwdFn,
        bwd: BwdFn,
        ctx: *mut c_void,
        inputs: *const *mut c_void,
        n_inputs: i64,
        sink: SinkFn,
        sink_ctx: *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn imgctl_cuda_current_stream(
        device: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

const ERR_LEN: usize = 512;

/// A differentiable function computed by Rust code.
pub trait CustomFn: Send + Sync + 'static {
    /// The outputs of `inputs`, and the tensors backward will need.
    fn forward(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), String>;
    /// One gradient per input (`None` for none), from the saved tensors and
    /// one gradient per output.
    fn backward(&self, saved: &[Tensor], grads: &[Tensor]) -> Result<Vec<Option<Tensor>>, String>;
}

fn message(err: &[c_char]) -> String {
    // SAFETY: the shim (or `write_err`) wrote a NUL-terminated string.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    msg.lines().next().unwrap_or_default().to_string()
}

/// # Safety
/// `err` must hold `len` writable bytes.
unsafe fn write_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: `n + 1 <= len` bytes of `err`.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

/// # Safety
/// `ptrs` holds `n` live `at::Tensor*`.
unsafe fn borrow(ptrs: *const *mut c_void, n: i64) -> Vec<Tensor> {
    (0..n.max(0) as usize)
        // SAFETY: as the caller promised; clone_from_ptr adds a reference.
        .map(|i| unsafe { Tensor::clone_from_ptr(*ptrs.add(i) as *mut _) })
        .collect()
}

fn push_all(ts: &[Tensor], vec: *mut c_void) -> Result<(), String> {
    for t in ts {
        // SAFETY: `vec` is the shim's std::vector<at::Tensor>; `t` is live.
        if unsafe { imgctl_tensor_vec_push(vec, t.as_ptr() as *mut c_void) } != 0 {
            return Err("cannot hand a tensor to the shim".into());
        }
    }
    Ok(())
}

fn guarded(err: *mut c_char, len: usize, f: impl FnOnce() -> Result<(), String>) -> c_int {
    let msg = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => m,
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into()),
    };
    // SAFETY: the shim's err buffer of `len` bytes.
    unsafe { write_err(err, len, &msg) };
    -1
}

unsafe extern "C" fn fwd_tramp<F: CustomFn>(
    ctx: *mut c_void,
    inputs: *const *mut c_void,
    n: i64,
    outputs: *mut c_void,
    saved: *mut c_void,
    err: *mut c_char,
    len: usize,
) -> c_int {
    guarded(err, len, || {
        // SAFETY: ctx is the `&'static F` given to `apply`.
        let f = unsafe { &*(ctx as *const F) };
        // SAFETY: the shim passes `n` live tensors.
        let ins = unsafe { borrow(inputs, n) };
        let (outs, keep) = f.forward(&ins)?;
        push_all(&outs, outputs)?;
        push_all(&keep, saved)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn bwd_tramp<F: CustomFn>(
    ctx: *mut c_void,
    saved: *const *mut c_void,
    n_saved: i64,
    grads: *const *mut c_void,
    n_grads: i64,
    out: *mut c_void,
    err: *mut c_char,
    len: usize,
) -> c_int {
    guarded(err, len, || {
        // SAFETY: ctx is the `&'static F` given to `apply`.
        let f = unsafe { &*(ctx as *const F) };
        // SAFETY: the shim passes live tensors, counted.
        let (s, g) = unsafe { (borrow(saved, n_saved), borrow(grads, n_grads)) };
        let gi = f.backward(&s, &g)?;
        let gi: Vec<Tensor> = gi
            .into_iter()
            .map(|t| t.unwrap_or_else(Tensor::new))
            .collect();
        push_all(&gi, out)
    })
}

unsafe extern "C" fn collect(sink: *mut c_void, tensor: *mut c_void) {
    // SAFETY: sink is the Vec<Tensor> of `apply`; tensor a new heap
    // at::Tensor* that tch takes over.
    unsafe { (*(sink as *mut Vec<Tensor>)).push(Tensor::from_ptr(tensor as *mut _)) };
}

/// Applies `f` to `inputs`: with grad on and an input that requires grad,
/// the outputs hang off one autograd node whose backward is `f.backward`.
pub fn apply<F: CustomFn>(f: &'static F, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
    let ptrs: Vec<*mut c_void> = inputs.iter().map(|t| t.as_ptr() as *mut c_void).collect();
    let mut outs: Vec<Tensor> = Vec::new();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: live tensors; ctx is 'static; the trampolines never unwind.
    let rc = unsafe {
        imgctl_custom_function(
            fwd_tramp::<F>,
            bwd_tramp::<F>,
            f as *const F as *mut c_void,
            ptrs.as_ptr(),
            ptrs.len() as i64,
            collect,
            &mut outs as *mut Vec<Tensor> as *mut c_void,
            err.as_mut_ptr(),
            ERR_LEN,
        )
    };
    if rc != 0 {
        return Err(message(&err));
    }
    Ok(outs)
}

/// Torch's current CUDA stream on `device`, as a `cudaStream_t` address
/// (0: the legacy default stream). Errors without CUDA, or when the current
/// stream is another one (this build cannot name it).
pub fn current_cuda_stream(device: usize) -> Result<usize, String> {
    let mut out: *mut c_void = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: one out-pointer and the error buffer.
    let rc =
        unsafe { imgctl_cuda_current_stream(device as i64, &mut out, err.as_mut_ptr(), ERR_LEN) };
    if rc != 0 {
        return Err(message(&err));
    }
    Ok(out as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// y = 3x, with a backward that says so; and a failing one.
    struct Triple;
    impl CustomFn for Triple {
        fn forward(&self, i: &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), String> {
            if i[0].numel() == 0 {
                return Err("empty input".into());
            }
            Ok((vec![i[0].detach() * 3.0], vec![]))
        }
        fn backward(&self, _: &[Tensor], g: &[Tensor]) -> Result<Vec<Option<Tensor>>, String> {
            Ok(vec![Some(&g[0] * 3.0)])
        }
    }
    static TRIPLE: Triple = Triple;

    #[test]
    fn a_rust_function_joins_autograd() {
        let x = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        let y = apply(&TRIPLE, &[&x]).unwrap().remove(0);
        assert!(y.requires_grad());
        (y * 2.0).sum(Kind::Float).backward();
        assert_eq!(Vec::<f32>::try_from(&x.grad()).unwrap(), [6.0, 6.0]);
        let empty = Tensor::zeros([0], (Kind::Float, Device::Cpu));
        let e = apply(&TRIPLE, &[&empty]).unwrap_err();
        assert!(e.contains("empty input"), "{e}");
    }

    #[test]
    fn the_current_stream_is_an_error_line_without_cuda() {
        if tch::Cuda::is_available() {
            return;
        }
        let e = current_cuda_stream(0).unwrap_err();
        assert!(!e.is_empty() && !e.contains('\n'), "{e}");
    }
}
