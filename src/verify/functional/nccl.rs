//! The NCCL check (`func.nccl_allreduce`): one float32 all-reduce over
//! every GPU from one thread (ncclCommInitAll), its result checked element by
//! element and its bus bandwidth reported.
//!
//! NCCL is reached through the shared shim [`crate::sys::nccl`] over the very
//! `libnccl.so.2` torch mapped, and the tensors are handed to it through
//! [`crate::sys::nccl_tensors`]. This file renders nothing and must not
//! load NCCL by soname search.
use std::sync::Arc;
use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::device::expected_on;
use super::thresholds::allreduce_busbw;
use crate::gpus::expected::{Metric, NoReference};
use crate::sys::nccl::{version_string, Communicator, NcclLibrary, RedOp};
use crate::sys::nccl_tensors::all_reduce_into;
use crate::verify::check::CheckResult;
use crate::verify::context::Context;

/// The body of `func.nccl_allreduce`.
pub fn nccl_allreduce(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "func.nccl_allreduce";
    if !crate::verify::torch::cuda_available() {
        return vec![CheckResult::skip(
            ID,
            "CUDA not available to torch (see torch.cuda_available)",
        )];
    }
    let n = tch::Cuda::device_count() as u32;
    match allreduce_check(n) {
        Ok(m) => {
            let busbw = allreduce_busbw(m.algbw_gbs, n);
            let mut r = if m.wrong_values > 0 {
                CheckResult::fail(ID, format!("all-reduce result wrong in {} element(s): expected {}", m.wrong_values, m.expected))
                    .hint("NCCL produced wrong sums: check P2P/NVLink health (nvml.nvlink), NCCL_P2P_DISABLE=1 to bisect")
            } else if n == 1 {
                CheckResult::pass(
                    ID,
                    "1 rank: result checked; bus bandwidth is 0 by definition (2(n-1)/n)",
                )
            } else {
                CheckResult::pass(ID, format!("{n} ranks, result checked"))
            };
            r = r
                .measured(format!(
                    "busbw {busbw:.1} GB/s, algbw {:.1} GB/s, {} MiB, NCCL {}",
                    m.algbw_gbs,
                    m.bytes >> 20,
                    m.version
                ))
                .threshold(format!("every element = {}", m.expected))
                .value(busbw, "GB/s")
                .expect(if n == 1 {
                    Err(NoReference(
                        "no reference: one rank moves nothing over a link".into(),
                    ))
                } else {
                    expected_on(ctx, 0, Metric::AllReduceBusbw)
                });
            vec![r]
        }
        Err(e) => vec![CheckResult::error(ID, e)],
    }
}

/// What one all-reduce run measured.
pub struct Measured {
    /// Algorithm bandwidth, GB/s (bytes per rank / time).
    pub algbw_gbs: f64,
    /// Elements that differ from the expected sum, over all ranks.
    pub wrong_values: i64,
    /// The expected value of every element.
    pub expected: f64,
    /// Bytes per rank.
    pub bytes: i64,
    /// NCCL's version.
    pub version: String,
}

/// A shim error as the check's one-line text (the CLI hint is not used here).
fn text(e: anyhow::Error) -> String {
    e.to_string()
}

/// Runs a float32 all-reduce (sum) of 256 MiB per rank over GPUs
/// 0..n, rank r contributing r+1, and checks every element.
pub fn allreduce_check(n: u32) -> Result<Measured, String> {
    // Only the libnccl.so.2 torch mapped, never another copy.
    let lib = Arc::new(NcclLibrary::mapped().map_err(text)?);
    let version = lib.version().map(version_string).unwrap_or_else(text);
    let devs: Vec<i32> = (0..n as i32).collect();
    let comms = Communicator::init_all(&lib, &devs).map_err(text)?;
    // 64 Mi floats = 256 MiB per rank: large enough to reach bus bandwidth.
    const COUNT: i64 = 64 << 20;
    let result = (|| -> Result<Measured, String> {
        let bufs: Vec<Tensor> = (0..n)
            .map(|r| {
                Tensor::f_full(
                    [COUNT],
                    (r + 1) as f64,
                    (Kind::Float, Device::Cuda(r as usize)),
                )
                .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        let outs: Vec<Tensor> = (0..n)
            .map(|r| {
                Tensor::f_empty([COUNT], (Kind::Float, Device::Cuda(r as usize)))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        let sync_all = || -> Result<(), String> {
            (0..n as usize)
                .try_for_each(|r| super::device::sync(Device::Cuda(r)))
                .map_err(|e| e.to_string())
        };
        sync_all()?;
        let once = || -> Result<(), String> {
            lib.group(|| {
                for (r, comm) in comms.iter().enumerate() {
                    // Buffers of COUNT floats on comm r's device (ncclCommInitAll
                    // gave comm r device r); they outlive the synchronisation below.
                    all_reduce_into(comm, &bufs[r], &outs[r], RedOp::Sum)?;
                }
                Ok(())
            })
            .map_err(text)?;
            sync_all()
        };
        once()?; // warm-up (connection setup)
        const ITERS: u32 = 5;
        let start = Instant::now();
        for _ in 0..ITERS {
            once()?;
        }
        let secs = start.elapsed().as_secs_f64() / ITERS as f64;
        let expected = (n * (n + 1) / 2) as f64;
        let mut wrong = 0i64;
        for o in &outs {
            let bad = o
                .f_ne(expected)
                .and_then(|t| t.f_sum(Kind::Int64))
                .and_then(|t| t.f_int64_value(&[]))
                .map_err(|e| e.to_string())?;
            wrong += bad;
        }
        let bytes = COUNT * 4;
        Ok(Measured {
            algbw_gbs: bytes as f64 / secs / 1e9,
            wrong_values: wrong,
            expected,
            bytes,
            version: version.clone(),
        })
    })();
    // The buffers are freed; now destroy (or, after an error, abort)
    // the communicators.
    drop(comms);
    result
}
