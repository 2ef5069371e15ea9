//! CPU tests of the fused GroupNorm: the kernels' arithmetic (the CPU
//! replay) against ATen's `group_norm` + `silu`, forward and backward; the
//! autograd wiring; the self-check and the fall-back decision.
use tch::{Device, Kind, Tensor};

use super::group_norm::op;
use super::reference::{self, Shape};
use super::self_check::{self, normalised_error};
use super::{decide, resolve};
use crate::choices::GroupNormKernel;

/// The tolerance the replay is held to in fp32, as the worst absolute
/// difference over the largest reference magnitude.
const TOL_F32: f64 = 2e-5;

fn data(len: i64, seed: i64) -> Tensor {
    tch::manual_seed(seed);
    Tensor::randn([len], (Kind::Float, Device::Cpu)) * 1.5 + 0.3
}

/// ATen's forward and gradients (fp32, CPU) for `x` `[N, C, H, W]`.
fn aten(x: &Tensor, g: &Tensor, b: &Tensor, w: &Tensor, groups: i64, act: bool) -> [Tensor; 4] {
    let x = x.detach().set_requires_grad(true);
    let g = g.detach().set_requires_grad(true);
    let b = b.detach().set_requires_grad(true);
    let mut y = x.group_norm(groups, Some(&g), Some(&b), 1e-5, false);
    if act {
        y = y.silu();
    }
    (&y * w).sum(Kind::Float).backward();
    [y.detach(), x.grad(), g.grad(), b.grad()]
}

fn nhwc_vec(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.permute([0, 2, 3, 1]).contiguous().flatten(0, -1)).unwrap()
}

fn from_nhwc(v: &[f32], [n, c, h, w]: [i64; 4]) -> Tensor {
    Tensor::from_slice(v)
        .view([n, h, w, c])
        .permute([0, 3, 1, 2])
}

#[test]
fn the_replay_matches_aten_forward_and_backward() {
    // The UNet's channel counts (32 groups), a non-power-of-two group
    // width, a pixel count below and above the block's rows, with and
    // without SiLU.
    for (i, &[n, c, h, w]) in [
        [2, 128, 8, 8],
        [1, 256, 16, 16],
        [2, 320, 5, 7],
        [1, 512, 4, 4],
        [3, 64, 1, 1],
    ]
    .iter()
    .enumerate()
    {
        for act in [true, false] {
            let shape = [n, c, h, w];
            let x = data(n * c * h * w, i as i64).view(shape);
            let g = data(c, 100 + i as i64) * 0.2 + 1.0;
            let b = data(c, 200 + i as i64) * 0.2;
            let wt = data(n * c * h * w, 300 + i as i64).view(shape);
            let [y, dx, dg, db] = aten(&x, &g, &b, &wt, 32, act);

            let s = Shape {
                n: n as usize,
                hw: (h * w) as usize,
                c: c as usize,
                groups: 32,
            };
            let xv = nhwc_vec(&x);
            let gv = Vec::<f32>::try_from(&g).unwrap();
            let bv = Vec::<f32>::try_from(&b).unwrap();
            let (m, r) = reference::stats(&xv, s, 1e-5);
            let yv = reference::forward(&xv, &m, &r, &gv, &bv, s, act);
            let grads = reference::backward(&xv, &nhwc_vec(&wt), &m, &r, &gv, &bv, s, act);
            let errs = [
                normalised_error(&from_nhwc(&yv, shape), &y),
                normalised_error(&from_nhwc(&grads.dx, shape), &dx),
                normalised_error(&Tensor::from_slice(&grads.dgamma), &dg),
                normalised_error(&Tensor::from_slice(&grads.dbeta), &db),
            ];
            for (q, e) in self_check::QUANTITIES.iter().zip(errs) {
                assert!(e <= TOL_F32, "{shape:?} act={act}: {q} off by {e:e}");
            }
        }
    }
}

#[test]
fn the_operation_is_one_autograd_node_with_atens_gradients() {
    let shape = [2, 128, 4, 6];
    let x = data(2 * 128 * 24, 7).view(shape);
    // bf16-exact parameters, so ATen's fp32 run sees the same values.
    let g = (data(128, 8) * 0.1 + 1.0)
        .to_kind(Kind::BFloat16)
        .to_kind(Kind::Float);
    let b = (data(128, 9) * 0.1)
        .to_kind(Kind::BFloat16)
        .to_kind(Kind::Float);
    let wt = data(2 * 128 * 24, 10).view(shape);
    let [y, dx, dg, db] = aten(&x, &g, &b, &wt, 32, true);
    // bf16 parameters, as in a bf16 run: the fp32 cast is part of the graph.
    let xk = x.detach().set_requires_grad(true);
    let gk = g.to_kind(Kind::BFloat16).detach().set_requires_grad(true);
    let bk = b.to_kind(Kind::BFloat16).detach().set_requires_grad(true);
    let yk = op(32, 1e-5, true).apply(&xk, &gk, &bk).unwrap();
    assert!(yk.requires_grad());
    (&yk * &wt).sum(Kind::Float).backward();
    assert!(normalised_error(&yk, &y) <= TOL_F32, "y");
    assert!(normalised_error(&xk.grad(), &dx) <= TOL_F32, "dx");
    assert_eq!(gk.grad().kind(), Kind::BFloat16);
    // The parameters' gradients come back in bf16: its rounding only.
    assert!(normalised_error(&gk.grad(), &dg) <= 1e-2, "dgamma");
    assert!(normalised_error(&bk.grad(), &db) <= 1e-2, "dbeta");
    // Refusals are errors, never wrong numbers.
    let e = op(32, 1e-5, true)
        .apply(
            &Tensor::zeros([2, 100, 2, 2], (Kind::Float, Device::Cpu)),
            &g,
            &b,
        )
        .unwrap_err();
    assert_eq!(e, "fused GroupNorm refuses 100 channels in 32 groups");
}

#[test]
fn the_self_check_passes_on_the_cpu_replay_in_fp32_and_bf16() {
    for kind in [Kind::Float, Kind::BFloat16] {
        let r = self_check::self_check(Device::Cpu, kind).unwrap();
        assert!(r.errors.iter().all(|e| *e <= r.tolerance), "{r:?}");
    }
}

#[test]
fn a_failed_self_check_falls_back_to_aten_with_one_line() {
    let st = decide(
        GroupNormKernel::Fused,
        vec![
            (
                Kind::Float,
                self_check::self_check(Device::Cpu, Kind::Float),
            ),
            (
                Kind::BFloat16,
                Err("dx is off by 3.0e-1 of its range (tolerance 1e-2)".into()),
            ),
        ],
    );
    assert_eq!(st.active, GroupNormKernel::Aten);
    let line = st.fallback.unwrap();
    assert_eq!(
        line,
        "fused GroupNorm failed its self-check (BFloat16: dx is off by 3.0e-1 of its range \
         (tolerance 1e-2)); using ATen's group_norm + silu"
    );
    assert!(
        st.self_check[0].starts_with("Float passed"),
        "{:?}",
        st.self_check
    );
    let ok = decide(
        GroupNormKernel::Fused,
        vec![(
            Kind::Float,
            self_check::self_check(Device::Cpu, Kind::Float),
        )],
    );
    assert_eq!((ok.active, ok.fallback), (GroupNormKernel::Fused, None));
    let aten = resolve(
        GroupNormKernel::Aten,
        Device::Cpu,
        super::ActivationKind(Kind::Float),
    );
    assert_eq!((aten.active, aten.fallback), (GroupNormKernel::Aten, None));
    let cpu = resolve(
        GroupNormKernel::Fused,
        Device::Cpu,
        crate::choices::Precision::Bf16,
    );
    assert_eq!(cpu.active, GroupNormKernel::Aten);
    assert!(cpu.fallback.unwrap().contains("CUDA only"));
}

#[test]
fn the_elementwise_grid_covers_every_channel_pixel_and_image() {
    use super::group_norm::elementwise_grid;
    let s = |n, hw, c| Shape {
        n,
        hw,
        c,
        groups: 32,
    };
    // The UNet's first level at batch 256 in bf16: 128 channels, 64x64.
    assert_eq!(elementwise_grid(s(256, 4096, 128)), [4, 512, 256]);
    // 320 channels (not a multiple of 32 threads' worth), one pixel.
    assert_eq!(elementwise_grid(s(1, 1, 320)), [10, 1, 1]);
    assert_eq!(elementwise_grid(s(2, 35, 96)), [3, 5, 2]);
    // Past the grid's y limit the kernels stride over the rest.
    assert_eq!(elementwise_grid(s(1, 1 << 20, 64))[1], 65_535);
}
