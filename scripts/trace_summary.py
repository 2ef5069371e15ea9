#!/usr/bin/env python3
"""Sums a Chrome trace from libtorch's profiler by kernel kind.

The trace is what `IMGCTL_PROFILE_TRACE=FILE imgctl train-demo --benchmark`
writes (or torch.profiler's export_chrome_trace). Prints one JSON object: the
traced steps' GPU kernel time by category (the categories of
scripts/profile_step.py), the top kernels, GPU-busy time against the traced
span (their difference is launch gaps and host syncs), and, for a CPU-only
trace, the top CPU ops by inclusive time instead.

Usage: trace_summary.py TRACE.json [--steps N]   (N: steps traced, default 3)
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_step import category  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    with open(a.trace) as f:
        events = [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]
    n = max(a.steps, 1)
    kernels, cpu = {}, {}
    for e in events:
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels[e["name"]] = kernels.get(e["name"], 0.0) + e.get("dur", 0.0)
        elif cat == "cpu_op":
            cpu[e["name"]] = cpu.get(e["name"], 0.0) + e.get("dur", 0.0)
    span = [e["ts"] for e in events] + [e["ts"] + e.get("dur", 0.0) for e in events]
    out = {
        "trace": a.trace,
        "steps": n,
        "traced_ms_per_step": round((max(span) - min(span)) / 1e3 / n, 2) if span else 0.0,
        "gpu_busy_ms_per_step": round(sum(kernels.values()) / 1e3 / n, 2),
    }
    cats = {}
    for name, us in kernels.items():
        c = category(name)
        cats[c] = cats.get(c, 0.0) + us / 1e3 / n
    out["categories_ms"] = {k: round(v, 2) for k, v in sorted(cats.items(), key=lambda kv: -kv[1])}
    top = kernels if kernels else cpu
    out["top_kernels_ms" if kernels else "top_cpu_ops_ms"] = [
        [name[:120], round(us / 1e3 / n, 3)] for name, us in sorted(top.items(), key=lambda kv: -kv[1])[:20]
    ]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
