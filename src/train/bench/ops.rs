//! `train-demo --benchmark --op-profile`: what one training step launches,
//! imgctl's against the PyTorch reference's with imgctl's recipe, counted from
//! the Chrome traces of libtorch's profiler (CPU operators and every
//! allocation) on both sides.
//!
//! A slower step that calls the same kernels differs in *what* it launches:
//! extra casts, copies, fills, per-parameter optimizer kernels, host
//! read-backs. Those show on any device as operator counts, so this module
//! reads both traces into per-step counts and bytes by operator name and
//! names every operator imgctl issues more often than the reference, each
//! with the reason it is there ([`EXPLAINED`]) or as unexplained. It parses
//! and compares; it must not run the reference (the command does) nor change
//! how the trainer steps.
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::Device;

use super::{bench_step, sync, BenchOptions, Step};
use crate::train::events::Events;
use crate::train::session;
use crate::train::sync::GradSync;

/// Version of the op-profile JSON document.
pub const SCHEMA_VERSION: u32 = 1;

/// Operators imgctl's step issues more often than the reference's, and why
/// each is there. An operator kind that is not listed here and shows up as
/// an extra is reported as unexplained (and the test of the op profile
/// fails): remove it from the step, or say here why it stays.
///
/// Measured on the CPU with the tiny preset in bf16 and in fp32
/// channels-last (the test of the op profile runs both) and with the default
/// model in bf16 (`bench/results/2026-12-03-op-profile-cpu.md`); every
/// reason below was traced in those profiles.
pub const EXPLAINED: &[(&str, &str)] = &[
    (
        "aten::cat",
        "attention's fused QKV: to_q/to_k/to_v's weights and biases are \
         concatenated (2 per attention block) so one GEMM runs where the \
         reference runs three; and inside aten::stack",
    ),
    (
        "aten::narrow",
        "the backward of attention's weight concatenations (aten::cat): the \
         fused QKV gradient is cut back into to_q's, to_k's and to_v's (views)",
    ),
    (
        "aten::unbind",
        "the fused QKV output split into q, k and v (a view per attention block)",
    ),
    (
        "aten::select",
        "inside aten::unbind (3 per attention block), and the DDPM schedule's \
         two coefficient rows taken from one gather (views)",
    ),
    (
        "aten::permute",
        "the fused QKV output [N, HW, 3, heads, hd] viewed as [3, N, heads, HW, hd], \
         forward and backward (views)",
    ),
    (
        "aten::_reshape_alias",
        "reshapes that stay views in the fused QKV path and their backward \
         (no bytes)",
    ),
    (
        "aten::stack",
        "unbind's backward stacks the q, k and v gradients into the fused one \
         (one per attention block), and the loss and gradient norm go to the \
         host together (one per step)",
    ),
    (
        "aten::addmm",
        "an attention whose input has NHWC strides (in channels-last runs, or \
         after an earlier attention's output: see aten::contiguous) has a \
         contiguous token matrix, so its linears (the fused QKV and to_out) \
         run as one addmm each where the reference's go through matmul → mm: \
         fewer GEMMs in all (addmm + mm)",
    ),
    (
        "aten::expand",
        "the bias of each addmm above, broadcast (a view)",
    ),
    (
        "aten::contiguous",
        "in NCHW runs the attention's output has NHWC strides (as in \
         diffusers) and the blocks after it copy activations, gradients and \
         convolution weights between layouts; adding the residual first cut \
         those copies but measured slower on the CPU (the comment at the \
         attention residual in src/train/model/blocks.rs); \
         in channels-last runs the convolution weights are NCHW views of the \
         flat buffer, converted to NHWC in each forward and backward (the \
         reference moves its parameters once)",
    ),
    (
        "aten::alias",
        "each ResNet block's input alias, so its gradient sums in one order \
         with and without gradient checkpointing (bit-identical results; a \
         view, no kernel)",
    ),
    (
        "aten::clone",
        "inside aten::contiguous: the layout copies explained there (the \
         default model; the tiny one's are as many as the reference's)",
    ),
    (
        "aten::empty_like",
        "inside aten::clone: the layout copies' outputs",
    ),
    (
        "aten::norm",
        "gradient clipping: one norm over the flat gradient buffer, where the \
         reference's clip_grad_norm_ runs _foreach_norm and then \
         linalg_vector_norm (aten::norm calls itself once inside)",
    ),
    (
        "aten::clamp_min",
        "gradient clipping's divisor max(1, (norm + 1e-6) / max_norm) computed \
         on the device (the reference clamps its coefficient: aten::clamp)",
    ),
    (
        "aten::index_select",
        "the DDPM schedule gathers both noise coefficients in one \
         index_select where the reference indexes twice (aten::index)",
    ),
];

/// One side's profiled steps, summed from its trace.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Tally {
    /// Steps the trace covers.
    pub steps: u64,
    /// ATen operator calls per step, nested ones included (autograd's
    /// nodes are not counted: they mirror the forward's operators).
    pub ops_per_step: f64,
    /// ATen operator calls from outside any other (the model's, the
    /// trainer's and autograd's own calls), per step.
    pub top_level_ops_per_step: f64,
    /// Bytes allocated per step (host and device).
    pub bytes_allocated_per_step: f64,
    /// Allocations per step.
    pub allocations_per_step: f64,
    /// Per operator name: calls and bytes allocated inside it (nested
    /// operators included), summed over the steps.
    pub by_op: BTreeMap<String, OpTotals>,
}

/// One operator's calls and the bytes allocated inside them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct OpTotals {
    /// Calls.
    pub calls: u64,
    /// Bytes allocated while it ran, in the operators it called too.
    pub bytes: u64,
}

/// A trace cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file cannot be read.
    #[error("cannot read the trace {path}: {error}")]
    Read {
        /// The trace.
        path: String,
        /// Why not.
        error: std::io::Error,
    },
    /// The file is not a Chrome trace.
    #[error("{path} is not a Chrome trace: {why}")]
    Format {
        /// The trace.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// Reads a Chrome trace of `steps` steps written by libtorch's profiler
/// (imgctl's [`crate::sys::torch_ext::profile_to_trace`] or torch.profiler's
/// `export_chrome_trace`).
pub fn tally_trace(path: &Path, steps: u64) -> Result<Tally, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|error| TraceError::Read {
        path: path.display().to_string(),
        error,
    })?;
    tally_json(&text, steps).map_err(|why| TraceError::Format {
        path: path.display().to_string(),
        why,
    })
}

/// An operator's span on one thread.
struct Span<'a> {
    tid: String,
    start: f64,
    end: f64,
    name: &'a str,
}

/// [`tally_trace`] of a trace's text.
pub fn tally_json(text: &str, steps: u64) -> Result<Tally, String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let events = doc
        .get("traceEvents")
        .and_then(|e| e.as_array())
        .ok_or("no traceEvents array")?;
    let tid = |e: &serde_json::Value| e.get("tid").map(|t| t.to_string()).unwrap_or_default();
    let num = |e: &serde_json::Value, k: &str| e.get(k).and_then(serde_json::Value::as_f64);
    let mut spans = Vec::new();
    // (thread, time, bytes) of each allocation.
    let mut allocs = Vec::new();
    for e in events {
        let cat = e.get("cat").and_then(|c| c.as_str()).unwrap_or("");
        let name = e.get("name").and_then(|c| c.as_str()).unwrap_or("");
        // ATen's operators only: the autograd nodes around them
        // (`MulBackward0`, `autograd::engine::evaluate_function: …`)
        // mirror the forward's operators, and a profiler's own annotations
        // differ between the two programs.
        if cat == "cpu_op" && name.starts_with("aten::") {
            let (Some(ts), Some(dur)) = (num(e, "ts"), num(e, "dur")) else {
                return Err(format!("the operator event {name} has no ts or dur"));
            };
            spans.push(Span {
                tid: tid(e),
                start: ts,
                end: ts + dur,
                name,
            });
        } else if name == "[memory]" {
            let bytes = e.get("args").and_then(|a| num(a, "Bytes")).unwrap_or(0.0);
            if bytes > 0.0 {
                allocs.push((tid(e), num(e, "ts").unwrap_or(0.0), bytes as u64));
            }
        }
    }
    if spans.is_empty() {
        return Err("it holds no ATen operator (cpu_op aten::…) events".into());
    }
    Ok(sweep(spans, allocs, steps.max(1)))
}

/// Counts the operators and gives each allocation to every operator open
/// on its thread at that time (each name once: `aten::to` inside
/// `aten::to` is not counted twice).
fn sweep(mut spans: Vec<Span<'_>>, mut allocs: Vec<(String, f64, u64)>, steps: u64) -> Tally {
    // Outer spans before the spans they enclose: by start, longer first.
    spans.sort_by(|a, b| {
        a.tid
            .cmp(&b.tid)
            .then(a.start.total_cmp(&b.start))
            .then(b.end.total_cmp(&a.end))
    });
    allocs.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut by_op: BTreeMap<String, OpTotals> = BTreeMap::new();
    let mut top_level = 0u64;
    let mut stack: Vec<usize> = Vec::new();
    let mut allocs = allocs.into_iter().peekable();
    let (mut alloc_bytes, mut alloc_count) = (0u64, 0u64);
    // Closes the spans of `stack` that are not open on `tid` at `ts`.
    let close = |stack: &mut Vec<usize>, spans: &[Span<'_>], tid: &str, ts: f64| {
        stack.retain(|&j| spans[j].tid == tid && spans[j].end >= ts);
    };
    let mut give = |stack: &[usize],
                    spans: &[Span<'_>],
                    bytes: u64,
                    by_op: &mut BTreeMap<String, OpTotals>| {
        alloc_bytes += bytes;
        alloc_count += 1;
        let mut names: Vec<&str> = stack.iter().map(|&j| spans[j].name).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            by_op.entry(name.to_string()).or_default().bytes += bytes;
        }
    };
    for i in 0..spans.len() {
        // Allocations before this span starts belong to what is open then.
        while let Some((t, ts, bytes)) =
            allocs.next_if(|(t, ts, _)| (t.as_str(), *ts) < (spans[i].tid.as_str(), spans[i].start))
        {
            close(&mut stack, &spans, &t, ts);
            give(&stack, &spans, bytes, &mut by_op);
        }
        close(&mut stack, &spans, &spans[i].tid, spans[i].start);
        if stack.is_empty() {
            top_level += 1;
        }
        by_op.entry(spans[i].name.to_string()).or_default().calls += 1;
        stack.push(i);
    }
    for (t, ts, bytes) in allocs {
        close(&mut stack, &spans, &t, ts);
        give(&stack, &spans, bytes, &mut by_op);
    }
    let n = steps as f64;
    Tally {
        steps,
        ops_per_step: by_op.values().map(|o| o.calls).sum::<u64>() as f64 / n,
        top_level_ops_per_step: top_level as f64 / n,
        bytes_allocated_per_step: alloc_bytes as f64 / n,
        allocations_per_step: alloc_count as f64 / n,
        by_op,
    }
}

/// One operator in both steps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpRow {
    /// The operator (`aten::copy_`).
    pub name: String,
    /// imgctl's calls per step.
    pub imgctl_per_step: f64,
    /// The reference's calls per step.
    pub reference_per_step: f64,
    /// Bytes allocated inside it (and what it called) per step, imgctl.
    pub imgctl_bytes_per_step: f64,
    /// The same, the reference.
    pub reference_bytes_per_step: f64,
    /// For an operator imgctl issues more often: why it stays
    /// ([`EXPLAINED`]), or `None` when nobody has said.
    pub explanation: Option<String>,
}

impl OpRow {
    /// imgctl issues it more often than the reference.
    pub fn is_extra(&self) -> bool {
        self.imgctl_per_step > self.reference_per_step
    }
}

/// `train-demo --benchmark --op-profile`'s report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpProfileReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `imgctl.op_profile`.
    pub kind: String,
    /// What both sides ran (preset, precision, batch, device, layout).
    pub setup: String,
    /// The reference's recipe and optimizer, as it reported them.
    pub reference_recipe: String,
    /// imgctl's step.
    pub imgctl: Tally,
    /// The reference's step (`scripts/bench_reference.py --recipe imgctl`).
    pub reference: Tally,
    /// Every operator either side issued, the extras first, then by the
    /// difference in calls.
    pub ops: Vec<OpRow>,
    /// The operators imgctl issues more often that [`EXPLAINED`] does not
    /// name.
    pub unexplained: Vec<String>,
}

impl OpProfileReport {
    /// Compares two tallies.
    pub fn new(setup: String, recipe: String, imgctl: Tally, reference: Tally) -> Self {
        let names: std::collections::BTreeSet<&String> =
            imgctl.by_op.keys().chain(reference.by_op.keys()).collect();
        let per = |t: &Tally, name: &str| {
            let o = t.by_op.get(name).copied().unwrap_or_default();
            let n = t.steps.max(1) as f64;
            (o.calls as f64 / n, o.bytes as f64 / n)
        };
        let mut ops: Vec<OpRow> = names
            .into_iter()
            .map(|name| {
                let (ic, ib) = per(&imgctl, name);
                let (rc, rb) = per(&reference, name);
                let explanation = (ic > rc)
                    .then(|| explanation(name))
                    .flatten()
                    .map(str::to_string);
                OpRow {
                    name: name.clone(),
                    imgctl_per_step: ic,
                    reference_per_step: rc,
                    imgctl_bytes_per_step: ib,
                    reference_bytes_per_step: rb,
                    explanation,
                }
            })
            .collect();
        ops.sort_by(|a, b| {
            let d = |r: &OpRow| r.imgctl_per_step - r.reference_per_step;
            b.is_extra()
                .cmp(&a.is_extra())
                .then(d(b).abs().total_cmp(&d(a).abs()))
                .then(a.name.cmp(&b.name))
        });
        let unexplained = ops
            .iter()
            .filter(|r| r.is_extra() && r.explanation.is_none())
            .map(|r| r.name.clone())
            .collect();
        Self {
            schema_version: SCHEMA_VERSION,
            kind: "imgctl.op_profile".into(),
            setup,
            reference_recipe: recipe,
            imgctl,
            reference,
            ops,
            unexplained,
        }
    }
}

/// Why imgctl issues `name` more often, from [`EXPLAINED`].
pub fn explanation(name: &str) -> Option<&'static str> {
    EXPLAINED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

/// Runs `opts.warmup` steps, then `opts.steps` steps under libtorch's
/// profiler (CPU operators and allocations; CUDA kernels too on a GPU),
/// whose Chrome trace goes to `trace`; returns the tally of those steps.
pub fn profile_rank(
    opts: &BenchOptions,
    sync_impl: Box<dyn GradSync>,
    events: Events,
    trace: &Path,
) -> anyhow::Result<Tally> {
    let run = &opts.run;
    let device: Device = run.device;
    crate::sys::torch_ext::quiet_kineto_for_cpu(device.is_cuda());
    let (session, ()) = session::start(run, false, None, sync_impl, || Ok(()))?;
    let mut trainer = session.trainer;
    let mut loader = session::start_loader(&trainer, std::sync::Arc::new(session.data));
    let mut step = |t: &mut crate::train::trainer::Trainer| bench_step(&mut loader, t, events);
    let step: &mut Step<'_> = &mut step;
    for _ in 0..opts.warmup {
        step(&mut trainer)?;
    }
    sync(device);
    crate::sys::torch_ext::profile_to_trace(trace, device.is_cuda(), || {
        for _ in 0..opts.steps {
            step(&mut trainer)?;
        }
        sync(device);
        Ok(())
    })?;
    drop(loader);
    Ok(tally_trace(trace, opts.steps)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, tid: u32, ts: f64, dur: f64) -> String {
        format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur}}}"#
        )
    }

    fn mem(tid: u32, ts: f64, bytes: i64) -> String {
        format!(
            r#"{{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":{tid},"ts":{ts},"args":{{"Bytes":{bytes}}}}}"#
        )
    }

    fn trace(events: &[String]) -> String {
        format!(r#"{{"traceEvents":[{}]}}"#, events.join(","))
    }

    #[test]
    fn operators_are_counted_and_allocations_go_to_every_open_one() {
        let t = trace(&[
            op("aten::linear", 1, 0.0, 10.0),
            op("aten::addmm", 1, 1.0, 5.0),
            mem(1, 2.0, 400),
            mem(1, 7.0, 100),
            mem(1, 8.0, -400),
            op("aten::copy_", 1, 12.0, 1.0),
            op("aten::linear", 1, 20.0, 10.0),
            op("aten::addmm", 1, 21.0, 5.0),
            mem(1, 22.0, 400),
            mem(1, 40.0, 8),
            op("aten::mul", 2, 3.0, 1.0),
            mem(2, 3.5, 16),
        ]);
        let tally = tally_json(&t, 2).unwrap();
        assert_eq!(
            tally.by_op["aten::linear"],
            OpTotals {
                calls: 2,
                bytes: 900
            }
        );
        assert_eq!(
            tally.by_op["aten::addmm"],
            OpTotals {
                calls: 2,
                bytes: 800
            }
        );
        assert_eq!(
            tally.by_op["aten::mul"],
            OpTotals {
                calls: 1,
                bytes: 16
            }
        );
        assert_eq!(tally.by_op["aten::copy_"].calls, 1);
        // linear, copy_, linear on thread 1 and mul on thread 2.
        assert_eq!(tally.top_level_ops_per_step, 2.0);
        assert_eq!(tally.ops_per_step, 3.0);
        // 400 + 100 + 400 + 8 + 16 (frees do not count).
        assert_eq!(tally.bytes_allocated_per_step, 462.0);
        assert_eq!(tally.allocations_per_step, 2.5);
    }

    #[test]
    fn a_trace_without_operators_or_events_is_refused() {
        assert!(tally_json("{}", 1).unwrap_err().contains("traceEvents"));
        let no_ops = trace(&[mem(1, 0.0, 8)]);
        assert!(tally_json(&no_ops, 1).unwrap_err().contains("cpu_op"));
        let no_aten = trace(&[op("MulBackward0", 1, 0.0, 1.0)]);
        assert!(tally_json(&no_aten, 1).unwrap_err().contains("aten::"));
        assert!(tally_json("not json", 1).is_err());
    }

    #[test]
    fn extras_come_first_and_unexplained_ones_are_named() {
        let tally = |ops: &[(&str, u64)]| Tally {
            steps: 1,
            by_op: ops
                .iter()
                .map(|(n, c)| {
                    (
                        n.to_string(),
                        OpTotals {
                            calls: *c,
                            bytes: 0,
                        },
                    )
                })
                .collect(),
            ..Tally::default()
        };
        let r = OpProfileReport::new(
            "test".into(),
            "recipe".into(),
            tally(&[("aten::conv", 4), ("aten::copy_", 9), ("aten::zero_", 1)]),
            tally(&[
                ("aten::conv", 4),
                ("aten::copy_", 3),
                ("aten::_foreach_add_", 5),
            ]),
        );
        let names: Vec<&str> = r.ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "aten::copy_",
                "aten::zero_",
                "aten::_foreach_add_",
                "aten::conv"
            ]
        );
        assert_eq!(r.unexplained, ["aten::copy_", "aten::zero_"]);
        assert!(!r.ops[2].is_extra());
    }
}
