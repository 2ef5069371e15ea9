#!/usr/bin/env python3
"""The lever sweep's table (issue 41): one row per variant of
scripts/device-check.sh's sweep_* stages, each measured in its own process.

Reads RESULTS/sweep_*.out (imgctl's --benchmark --json, or --compare --json
for the PyTorch rows) and RESULTS/summary.tsv (a stage that did not run says
why), writes the table as TSV to stdout: variant, img/s, step ms (median),
MFU, peak memory (GiB, torch's allocator peak where known, else the device's
used peak), and which levers passed their self-check.

MFU of the PyTorch rows uses imgctl's FLOPs per image and peak (the same
model): img/s x FLOPs per image / peak.
"""
import json
import os
import sys

ROWS = [
    ("sweep_baseline", "imgctl baseline (NCHW, ATen GroupNorm)"),
    ("sweep_cl", "imgctl + channels-last"),
    ("sweep_cl_gn", "imgctl + channels-last + fused GroupNorm"),
    ("sweep_graphs", "imgctl + CUDA graphs"),
    ("sweep_all", "imgctl, all levers built"),
]
REF_ROWS = [
    ("eager_matched", "PyTorch eager, imgctl's recipe"),
    ("eager", "PyTorch eager, diffusers' recipe"),
    ("compile", "PyTorch torch.compile, diffusers' recipe"),
]
GIB = float(1 << 30)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stage_notes(res):
    notes = {}
    try:
        with open(os.path.join(res, "summary.tsv")) as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split("\t")
                if len(cols) >= 4:
                    notes[cols[0]] = (cols[1], cols[3])
    except OSError:
        pass
    return notes


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def imgctl_row(name, label, r):
    mem = r.get("memory") or {}
    peak = mem.get("peak_allocated_bytes") or mem.get("peak_used_bytes")
    levers = []
    if r.get("channels_last"):
        levers.append("channels-last")
    gn = r.get("groupnorm") or "aten"
    if gn == "fused":
        fused, aten = r.get("groupnorm_calls") or [0, 0]
        levers.append("fused GroupNorm (self-check passed; %s calls fused, %s on ATen)" % (fused, aten))
    elif r.get("groupnorm_fallback"):
        levers.append("fused GroupNorm FAILED: " + r["groupnorm_fallback"])
    if r.get("attention_backend"):
        levers.append("attention " + r["attention_backend"])
    if (r.get("read_every") or 1) > 1:
        levers.append("loss read every %s steps" % r["read_every"])
    return [
        label,
        fmt(r.get("img_per_s"), ".1f"),
        fmt((r.get("step_ms") or {}).get("median"), ".1f"),
        fmt((r.get("flops") or {}).get("mfu"), ".3f"),
        fmt(peak / GIB if peak else None, ".2f"),
        "; ".join(levers) or "none",
    ]


def main():
    res = sys.argv[1]
    notes = stage_notes(res)
    out = [["variant", "img_per_s", "step_ms_median", "mfu", "peak_gib", "levers"]]
    flops = None
    for name, label in ROWS:
        r = load(os.path.join(res, name + ".out"))
        if isinstance(r, dict) and "img_per_s" in r:
            out.append(imgctl_row(name, label, r))
            f = r.get("flops") or {}
            if f.get("peak_tflops"):
                flops = (f["train_flops_per_image"], f["peak_tflops"])
        else:
            code, note = notes.get(name, ("not run", ""))
            out.append([label, "", "", "", "", "no figures (stage %s: %s)" % (code, note)])
    c = load(os.path.join(res, "sweep_ref.out"))
    runs = {r.get("mode"): r for r in (c or {}).get("pytorch", [])} if isinstance(c, dict) else {}
    for mode, label in REF_ROWS:
        r = runs.get(mode)
        if not r or not r.get("ok"):
            why = (r or {}).get("error") or (c or {}).get("compile_note") or notes.get("sweep_ref", ("not run", ""))[1]
            out.append([label, "", "", "", "", "no figures (%s)" % why])
            continue
        ips = r.get("img_per_s")
        mfu = ips * flops[0] / (flops[1] * 1e12) if (ips and flops) else None
        peak = r.get("peak_allocated_bytes") or r.get("device_used_peak_bytes")
        out.append([
            label,
            fmt(ips, ".1f"),
            fmt(r.get("step_ms_median"), ".1f"),
            fmt(mfu, ".3f"),
            fmt(peak / GIB if peak else None, ".2f"),
            "reference",
        ])
    for row in out:
        print("\t".join(row))


if __name__ == "__main__":
    main()
