#!/usr/bin/env python3
"""Where one training step's GPU time goes, for the performance goals of the GPU issue.

Builds diffusers' UNet2DModel from a config.json (imgctl train-demo writes the
one it trains under OUT/unet/), trains it on random batches with the DDPM
epsilon loss (bf16 autocast and AdamW foreach: diffusers' recipe), and runs
torch.profiler over a few steps after warm-up. Prints one JSON object: wall
and GPU-busy milliseconds per step (their difference is launch gaps and host
syncs), kernel time by category (convolution, GEMM, normalization,
elementwise, attention, optimizer, reduction, copy/cast) and the top kernels.

The categories come from kernel names (cuDNN's implicit-GEMM convolutions on
Hopper are named ..._fprop_/_dgrad_/_wgrad_...), so they are approximate.

Usage: profile_step.py --unet-config config.json [--batch-size 256]
       [--precision bf16|fp32] [--channels-last] [--warmup 5] [--steps 3]
"""
import argparse
import json
import time


CATEGORIES = [
    ("convolution", ("fprop", "dgrad", "wgrad", "conv", "implicit_gemm", "cudnn")),
    ("attention", ("flash", "fmha", "attention", "efficient_attention", "mem_eff")),
    ("gemm", ("gemm", "cutlass", "cublas", "sm90_xmma", "nvjet")),
    ("normalization", ("group_norm", "groupnorm", "layer_norm", "batch_norm", "welford", "norm")),
    ("optimizer", ("adam", "multi_tensor_apply", "foreach")),
    ("reduction", ("reduce",)),
    ("copy/cast", ("copy", "cast", "memcpy", "memset", "fill")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "silu", "mul", "add")),
]


def category(name):
    n = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in n for k in keys):
            return cat
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unet-config", required=True)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from diffusers import UNet2DModel
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.backends.cudnn.benchmark = cuda
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    with open(a.unet_config) as f:
        cfg = json.load(f)
    model = UNet2DModel.from_config(cfg).to(device, memory_format=fmt).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    size = cfg.get("sample_size", 64)
    chans = cfg.get("in_channels", 3)
    x = torch.randn(a.batch_size, chans, size, size, device=device).to(memory_format=fmt)
    noise = torch.randn_like(x)
    t = torch.randint(0, 1000, (a.batch_size,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        with autocast:
            pred = model(x + noise, t).sample
            loss = F.mse_loss(pred.float(), noise.float())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step().item()
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(a.steps):
            step().item()
        if cuda:
            torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / a.steps

    kernels = {}
    for e in prof.events():
        if cuda and str(getattr(e, "device_type", "")).endswith("CUDA"):
            try:
                us = e.time_range.elapsed_us()
            except Exception:  # noqa: BLE001 - older or newer event shapes
                us = getattr(e, "device_time", 0.0) or 0.0
            kernels[e.name] = kernels.get(e.name, 0.0) + us
    busy_ms = sum(kernels.values()) / 1e3 / a.steps
    cats = {}
    for name, us in kernels.items():
        c = category(name)
        cats[c] = cats.get(c, 0.0) + us / 1e3 / a.steps
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:20]
    out = {
        "batch_size": a.batch_size,
        "precision": a.precision,
        "channels_last": a.channels_last,
        "torch": torch.__version__,
        "wall_ms_per_step": round(wall_ms, 2),
        "gpu_busy_ms_per_step": round(busy_ms, 2),
        "categories_ms": {k: round(v, 2) for k, v in sorted(cats.items(), key=lambda kv: -kv[1])},
        "top_kernels_ms": [[n[:120], round(us / 1e3 / a.steps, 3)] for n, us in top],
        "ops_by_self_device_time": [],
    }
    try:
        avgs = prof.key_averages()
        key = "self_device_time_total" if hasattr(avgs[0], "self_device_time_total") else "self_cuda_time_total"
        ops = sorted(avgs, key=lambda e: -getattr(e, key, 0.0))[:20]
        out["ops_by_self_device_time"] = [
            [e.key[:80], round(getattr(e, key, 0.0) / 1e3 / a.steps, 3), e.count // a.steps] for e in ops
        ]
    except Exception as ex:  # noqa: BLE001 - a summary is optional
        out["ops_error"] = str(ex)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
