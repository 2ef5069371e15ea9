#!/usr/bin/env python3
"""PyTorch reference for `imgctl train-demo --benchmark --compare`.

Trains diffusers' UNet2DModel, built from the very config imgctl trains (the
diffusers config.json imgctl writes), on the very batches imgctl's synthetic
loader produced (images, noise and timesteps read from a raw file), with the
same batch, precision and optimizer hyperparameters, and prints one JSON
object on stdout: images per second, step times and peak memory.

The step mirrors diffusers' examples/unconditional_image_generation/
train_unconditional.py: DDPM add_noise (1000 steps, linear betas 1e-4..0.02),
epsilon prediction, MSE loss, backward, clip_grad_norm_(1.0), AdamW (lr 1e-4,
betas (0.95, 0.999), weight decay 1e-6, eps 1e-8), EMA of the weights, and
`loss.detach().item()` every step (the script logs it every step). bf16 and
fp16 run under torch.autocast with fp32 weights (fp16 with a GradScaler), as
accelerate's mixed precision does. On CUDA cuDNN's autotuner is on
(torch.backends.cudnn.benchmark), as it is in imgctl; --channels-last puts the
model and its inputs in channels-last layout, as imgctl's flag of that name;
--gradient-checkpointing calls diffusers' enable_gradient_checkpointing(), as
imgctl's flag of that name checkpoints the same ResNets.

--recipe imgctl trains the way imgctl does instead of the way diffusers'
script does: AdamW as one fused kernel (fused=True), and in bf16 the model's
weights and gradients in bf16 over an fp32 master copy that the optimizer
updates (no autocast). The default recipe is what diffusers users run; this
one isolates the framework from the recipe.

--op-profile TRACE runs the timed steps under torch.profiler (CPU operators
with their input shapes and every allocation, profile_memory=True) and writes its Chrome trace to
TRACE: `imgctl train-demo --benchmark --op-profile` reads it beside the trace
of its own steps and counts the operators of each (the timings of such steps
are the profiler's, not a benchmark's).

Usage: bench_reference.py --unet-config config.json --data batches.bin
       --batches K --batch-size B --image-size S --precision bf16
       --device cuda --warmup 10 --steps 50 [--compile] [--channels-last]
       [--gradient-checkpointing] [--recipe default|imgctl]
       [--op-profile TRACE]
"""
import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unet-config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batches", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--recipe", choices=["default", "imgctl"], default="default")
    ap.add_argument("--op-profile", metavar="TRACE")
    a = ap.parse_args()

    matched = a.recipe == "imgctl"
    mode = "compile" if a.compile else ("eager_matched" if matched else "eager")
    result = {"mode": mode, "ok": False}
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
        import diffusers
        from diffusers import UNet2DModel
    except Exception as e:  # noqa: BLE001 - reported to imgctl as data
        result["error"] = f"cannot import the reference's dependencies: {e}"
        print(json.dumps(result))
        return 0

    result["torch_version"] = torch.__version__
    result["diffusers_version"] = diffusers.__version__
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        # Device memory in use before the model exists: this process's CUDA
        # context plus whatever other processes hold (imgctl's own benchmark
        # still holds its memory under --compare), subtracted from the peak.
        free, total = torch.cuda.mem_get_info(device)
        result["device_used_baseline_bytes"] = total - free
    result["cudnn_benchmark"] = cuda
    result["channels_last"] = a.channels_last
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format

    with open(a.unet_config) as f:
        cfg = json.load(f)
    model = UNet2DModel.from_config(cfg).to(device, memory_format=fmt)
    model.train()
    if a.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    result["gradient_checkpointing"] = a.gradient_checkpointing
    # imgctl's bf16: the model in bf16, an fp32 master copy for the optimizer.
    pure_bf16 = matched and a.precision == "bf16"
    if pure_bf16:
        model.to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    result["params"] = sum(p.numel() for p in params)
    master = [p.detach().float().clone() for p in params] if pure_bf16 else params
    if pure_bf16:
        # fp32 gradients of the master weights, allocated once; the bf16
        # gradients are cast into them in one multi-tensor copy per step.
        for m in master:
            m.grad = torch.zeros_like(m)
    adamw = dict(lr=a.lr, betas=(0.95, 0.999), weight_decay=1e-6, eps=1e-8)
    opt = torch.optim.AdamW(master, fused=True, **adamw) if matched else torch.optim.AdamW(master, **adamw)
    # torch's default implementation choice (what diffusers' scripts get):
    # foreach (multi-tensor) on CUDA, a per-parameter loop on the CPU.
    d = opt.defaults
    impl = "fused" if d.get("fused") else (
        "foreach" if d.get("foreach") or (d.get("foreach") is None and cuda) else "for-loop")
    result["optimizer"] = f"AdamW {impl}"
    result["recipe"] = (
        "bf16 weights over fp32 master weights" if pure_bf16
        else f"autocast {a.precision}, fp32 weights" if a.precision != "fp32"
        else "fp32")
    ema = [p.detach().clone() for p in master]
    ema_decay = 0.9999

    # imgctl's batches: K × (images f32, noise f32, timesteps i64), little-endian.
    per = a.batch_size * a.channels * a.image_size * a.image_size
    raw = np.fromfile(a.data, dtype=np.uint8)
    batches = []
    off = 0
    for _ in range(a.batches):
        x0 = raw[off:off + 4 * per].view(np.float32).reshape(a.batch_size, a.channels, a.image_size, a.image_size)
        off += 4 * per
        nz = raw[off:off + 4 * per].view(np.float32).reshape(a.batch_size, a.channels, a.image_size, a.image_size)
        off += 4 * per
        ts = raw[off:off + 8 * a.batch_size].view(np.int64)
        off += 8 * a.batch_size
        batches.append((torch.from_numpy(x0.copy()), torch.from_numpy(nz.copy()), torch.from_numpy(ts.copy())))
    if off != raw.size:
        result["error"] = f"data file holds {raw.size} bytes, expected {off}"
        print(json.dumps(result))
        return 0

    # DDPM: 1000 steps, linear betas 1e-4..0.02 (DDPMScheduler defaults).
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float32)
    acp = torch.cumprod(1.0 - betas, dim=0).to(device)
    sqrt_acp = acp.sqrt()
    sqrt_1m = (1.0 - acp).sqrt()

    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler("cuda") if (a.precision == "fp16" and cuda) else None
    fwd = torch.compile(model) if a.compile else model

    def step(i):
        x0, nz, ts = batches[i % len(batches)]
        x0 = x0.to(device, memory_format=fmt)
        nz = nz.to(device, memory_format=fmt)
        ts = ts.to(device)
        noisy = sqrt_acp[ts].view(-1, 1, 1, 1) * x0 + sqrt_1m[ts].view(-1, 1, 1, 1) * nz
        if pure_bf16:
            noisy = noisy.to(torch.bfloat16)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None and not pure_bf16):
            pred = fwd(noisy, ts).sample
        loss = F.mse_loss(pred.float(), nz)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if pure_bf16:
                pairs = [(m.grad, p.grad) for m, p in zip(master, params) if p.grad is not None]
                torch._foreach_copy_([g for g, _ in pairs], [g for _, g in pairs])
                for p in params:
                    p.grad = None
            torch.nn.utils.clip_grad_norm_(master, 1.0)
            opt.step()
        # The master gradients are overwritten by the next copy, not freed.
        opt.zero_grad(set_to_none=not pure_bf16)
        with torch.no_grad():
            if pure_bf16:
                torch._foreach_copy_(params, master)
            torch._foreach_lerp_(ema, [p.detach() for p in master], 1.0 - ema_decay)
        return loss.detach().item()

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    try:
        t = time.perf_counter()
        for i in range(a.warmup):
            step(i)
        sync()
        result["warmup_s"] = time.perf_counter() - t
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        walls = []
        peak_used = 0
        t0 = time.perf_counter()
        loss = float("nan")
        prof = None
        if a.op_profile:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            prof = profile(activities=acts, profile_memory=True, record_shapes=True)
            prof.__enter__()
        for i in range(a.steps):
            ts0 = time.perf_counter()
            loss = step(a.warmup + i)
            walls.append(time.perf_counter() - ts0)
            if cuda:
                free, total = torch.cuda.mem_get_info(device)
                peak_used = max(peak_used, total - free)
        sync()
        if prof is not None:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(a.op_profile)
        elapsed = time.perf_counter() - t0
        walls_ms = sorted(w * 1e3 for w in walls)
        n = len(walls_ms)
        result.update(
            ok=True,
            img_per_s=a.batch_size * a.steps / elapsed,
            step_ms_mean=sum(walls_ms) / max(n, 1),
            step_ms_median=(walls_ms[n // 2] if n % 2 else (walls_ms[n // 2 - 1] + walls_ms[n // 2]) / 2) if n else 0.0,
            last_loss=loss,
            peak_allocated_bytes=torch.cuda.max_memory_allocated(device) if cuda else None,
            peak_reserved_bytes=torch.cuda.max_memory_reserved(device) if cuda else None,
            device_used_peak_bytes=peak_used if cuda else None,
            device_name=torch.cuda.get_device_name(device) if cuda else "cpu",
        )
    except Exception as e:  # noqa: BLE001 - e.g. torch.compile unavailable
        result["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
