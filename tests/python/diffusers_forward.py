"""Reference side of imgctl's diffusers parity tests (tests/it/train/model.rs).

Runs diffusers 0.33.1 (UNet2DModel, DDPMScheduler, DDIMScheduler) on CPU in
float32 and writes its results as safetensors for the Rust test to compare.

Modes:
  forward   load imgctl's weights into UNet2DModel(config) with
            load_state_dict(strict=True) and run the forward pass;
  init      build a seeded diffusers model, perturb every parameter, save its
            state dict and its forward output (imgctl loads and compares);
  keys      write the state-dict key -> shape map, parameter count and
            config.json of a config (JSON);
  schedule  run add_noise and full DDPM / DDIM sampling loops with a fixed,
            model-free noise predictor, saving every random draw.
"""

import argparse
import json
import sys

import torch
from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
from safetensors.torch import load_file, save_file


def build(config_path):
    with open(config_path) as f:
        config = json.load(f)
    return UNet2DModel.from_config(config).eval()


def forward(model, inputs_path):
    inputs = load_file(inputs_path)
    with torch.no_grad():
        return model(inputs["x"], inputs["t"]).sample.contiguous()


def cmd_forward(args):
    if args.pretrained:
        # The folder imgctl's save_pretrained wrote; diffusers checks the
        # keys itself and raises on missing or unexpected ones.
        model = UNet2DModel.from_pretrained(args.pretrained).eval()
        saved = load_file(f"{args.pretrained}/diffusion_pytorch_model.safetensors")
        assert set(saved) == set(model.state_dict()), "key sets differ"
    else:
        model = build(args.config)
        # strict=True: a missing or unexpected key raises.
        model.load_state_dict(load_file(args.weights), strict=True)
    save_file({"out": forward(model, args.inputs)}, args.out)


def cmd_init(args):
    torch.manual_seed(args.seed)
    model = build(args.config)
    with torch.no_grad():
        for p in model.parameters():
            # GroupNorm starts at weight 1 / bias 0; perturb so the
            # comparison also checks which tensor goes where.
            p.add_(torch.randn_like(p) * args.perturb)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, args.weights_out, metadata={"format": "pt"})
    save_file({"out": forward(model, args.inputs)}, args.out)


def cmd_keys(args):
    model = build(args.config)
    keys = {k: list(v.shape) for k, v in model.state_dict().items()}
    config = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
    config["_class_name"] = "UNet2DModel"
    json.dump(
        {
            "keys": keys,
            "params": sum(p.numel() for p in model.parameters()),
            "config": config,
        },
        open(args.out, "w"),
    )


def fake_eps(x, t):
    # A deterministic stand-in for a trained model, smooth enough that f32
    # rounding is not amplified over the loop (cancellation in x0 at high t).
    return 0.5 * torch.sin(x) * (0.3 + t / 1000.0)


def cmd_schedule(args):
    inputs = load_file(args.inputs)
    x0, noise, t = inputs["x0"], inputs["noise"], inputs["t"]
    out = {}
    ddpm = DDPMScheduler()  # defaults: 1000 steps, linear 1e-4..0.02, fixed_small, clip 1
    out["alphas_cumprod"] = ddpm.alphas_cumprod.clone()
    out["noisy"] = ddpm.add_noise(x0, noise, t)

    xt = inputs["x_T"]
    ddpm.set_timesteps(args.steps)
    out["ddpm_timesteps"] = ddpm.timesteps.clone()
    g = torch.Generator().manual_seed(args.seed)
    g_copy = torch.Generator().manual_seed(args.seed)
    x = xt.clone()
    draws = []
    for t_ in ddpm.timesteps:
        if int(t_) > 0:
            draws.append(torch.randn(x.shape, generator=g_copy, dtype=x.dtype))
        x = ddpm.step(fake_eps(x, float(t_)), t_, x, generator=g).prev_sample
    out["ddpm_noise"] = torch.stack(draws)
    out["ddpm_final"] = x

    ddim = DDIMScheduler()  # eta 0, set_alpha_to_one, leading spacing, clip 1
    ddim.set_timesteps(args.steps)
    out["ddim_timesteps"] = ddim.timesteps.clone()
    x = xt.clone()
    for t_ in ddim.timesteps:
        x = ddim.step(fake_eps(x, float(t_)), t_, x).prev_sample
    out["ddim_final"] = x
    save_file({k: v.contiguous() for k, v in out.items()}, args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("forward")
    f.add_argument("--config")
    f.add_argument("--weights")
    f.add_argument("--pretrained")
    f.add_argument("--inputs", required=True)
    f.add_argument("--out", required=True)
    i = sub.add_parser("init")
    i.add_argument("--config", required=True)
    i.add_argument("--seed", type=int, required=True)
    i.add_argument("--perturb", type=float, default=0.05)
    i.add_argument("--weights-out", required=True)
    i.add_argument("--inputs", required=True)
    i.add_argument("--out", required=True)
    k = sub.add_parser("keys")
    k.add_argument("--config", required=True)
    k.add_argument("--out", required=True)
    s = sub.add_parser("schedule")
    s.add_argument("--inputs", required=True)
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(2)
    {"forward": cmd_forward, "init": cmd_init, "keys": cmd_keys, "schedule": cmd_schedule}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
