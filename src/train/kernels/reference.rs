//! The fused GroupNorm (+ SiLU) kernels' arithmetic, replayed on the CPU in
//! the kernels' order (`group_norm_silu.cu`): the same per-thread pixel
//! strides, Welford updates, shared-memory trees and fp32 formulas, thread
//! by thread. A CPU test holds this replay against ATen's `group_norm` +
//! `silu`, forward and backward; the CPU path of [`super::group_norm`] runs
//! it, so the autograd wiring is tested without a GPU too.
//!
//! Layout as in the kernels: `[N, HW, C]` (channels-last), `C = G * CG`.
//! Must change together with the `.cu` file.

/// Threads per block of the per-(n, g) kernels (the `.cu`'s `MAX_THREADS`).
pub const MAX_THREADS: usize = 256;

/// The problem's extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Batch.
    pub n: usize,
    /// Pixels per image (H·W).
    pub hw: usize,
    /// Channels.
    pub c: usize,
    /// Groups (C divisible by it).
    pub groups: usize,
}

impl Shape {
    /// Channels per group.
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }

    /// The per-(n, g) block: (CG, BY) threads.
    pub fn block(&self) -> (usize, usize) {
        let cg = self.cg();
        (cg, (MAX_THREADS / cg).max(1))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Welford {
    n: f32,
    mean: f32,
    m2: f32,
}

fn merge(a: Welford, b: Welford) -> Welford {
    if b.n == 0.0 {
        return a;
    }
    if a.n == 0.0 {
        return b;
    }
    let n = a.n + b.n;
    let d = b.mean - a.mean;
    let f = b.n / n;
    Welford {
        n,
        mean: a.mean + d * f,
        m2: a.m2 + b.m2 + d * d * a.n * f,
    }
}

/// `gn_stats`: mean and 1/sqrt(var + eps) of each (n, g), `[N * G]`.
pub fn stats(x: &[f32], s: Shape, eps: f32) -> (Vec<f32>, Vec<f32>) {
    let (cg, by) = s.block();
    let nt = cg * by;
    let (mut mean, mut rstd) = (Vec::new(), Vec::new());
    for n in 0..s.n {
        for g in 0..s.groups {
            let mut sh = vec![Welford::default(); nt];
            for ty in 0..by {
                for tx in 0..cg {
                    let base = n * s.hw * s.c + g * cg + tx;
                    let mut w = Welford::default();
                    let mut p = ty;
                    while p < s.hw {
                        let v = x[base + p * s.c];
                        w.n += 1.0;
                        let d = v - w.mean;
                        w.mean += d / w.n;
                        w.m2 += d * (v - w.mean);
                        p += by;
                    }
                    sh[ty * cg + tx] = w;
                }
            }
            let mut stride = nt.next_power_of_two() / 2;
            while stride > 0 {
                for tid in 0..stride.min(nt) {
                    if tid + stride < nt {
                        sh[tid] = merge(sh[tid], sh[tid + stride]);
                    }
                }
                stride /= 2;
            }
            mean.push(sh[0].mean);
            rstd.push(1.0 / (sh[0].m2 / sh[0].n + eps).sqrt());
        }
    }
    (mean, rstd)
}

fn silu(z: f32) -> f32 {
    z / (1.0 + (-z).exp())
}

/// `gn_fwd`: `[silu](xhat * gamma + beta)`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    beta: &[f32],
    s: Shape,
    act: bool,
) -> Vec<f32> {
    let cg = s.cg();
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = i % s.c;
            let k = (i / (s.hw * s.c)) * s.groups + ch / cg;
            let z = (v - mean[k]) * rstd[k] * gamma[ch] + beta[ch];
            if act {
                silu(z)
            } else {
                z
            }
        })
        .collect()
}

/// The kernels' `dz_of`: (dz, xhat).
fn dz_of(xv: f32, dyv: f32, m: f32, r: f32, ga: f32, be: f32, act: bool) -> (f32, f32) {
    let xh = (xv - m) * r;
    if !act {
        return (dyv, xh);
    }
    let z = xh * ga + be;
    let sg = 1.0 / (1.0 + (-z).exp());
    (dyv * (sg * (1.0 + z * (1.0 - sg))), xh)
}

/// The gradients of one GroupNorm (+ SiLU).
#[derive(Debug, Clone)]
pub struct Grads {
    /// Of the input, `[N, HW, C]`.
    pub dx: Vec<f32>,
    /// Of gamma, `[C]`.
    pub dgamma: Vec<f32>,
    /// Of beta, `[C]`.
    pub dbeta: Vec<f32>,
}

/// `gn_bwd_sums`, `gn_bwd_reduce` and `gn_bwd_dx` in turn.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    x: &[f32],
    dy: &[f32],
    mean: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    beta: &[f32],
    s: Shape,
    act: bool,
) -> Grads {
    let (cg, by) = s.block();
    let mut sum_dz = vec![0f32; s.n * s.c];
    let mut sum_dzxh = vec![0f32; s.n * s.c];
    for n in 0..s.n {
        for g in 0..s.groups {
            let k = n * s.groups + g;
            let mut sa = vec![0f32; cg * by];
            let mut sb = vec![0f32; cg * by];
            for ty in 0..by {
                for tx in 0..cg {
                    let ch = g * cg + tx;
                    let (mut a, mut b) = (0f32, 0f32);
                    let mut p = ty;
                    while p < s.hw {
                        let off = n * s.hw * s.c + p * s.c + ch;
                        let (dz, xh) =
                            dz_of(x[off], dy[off], mean[k], rstd[k], gamma[ch], beta[ch], act);
                        a += dz;
                        b += dz * xh;
                        p += by;
                    }
                    sa[ty * cg + tx] = a;
                    sb[ty * cg + tx] = b;
                }
            }
            let mut stride = by.next_power_of_two() / 2;
            while stride > 0 {
                for ty in 0..stride.min(by) {
                    if ty + stride < by {
                        for tx in 0..cg {
                            sa[ty * cg + tx] += sa[(ty + stride) * cg + tx];
                            sb[ty * cg + tx] += sb[(ty + stride) * cg + tx];
                        }
                    }
                }
                stride /= 2;
            }
            for tx in 0..cg {
                sum_dz[n * s.c + g * cg + tx] = sa[tx];
                sum_dzxh[n * s.c + g * cg + tx] = sb[tx];
            }
        }
    }
    let inv_m = 1.0 / (s.hw * cg) as f32;
    let mut dgamma = vec![0f32; s.c];
    let mut dbeta = vec![0f32; s.c];
    for ch in 0..s.c {
        let (mut a, mut b) = (0f32, 0f32);
        for n in 0..s.n {
            a += sum_dzxh[n * s.c + ch];
            b += sum_dz[n * s.c + ch];
        }
        dgamma[ch] = a;
        dbeta[ch] = b;
    }
    let mut ca = vec![0f32; s.n * s.groups];
    let mut cb = vec![0f32; s.n * s.groups];
    for n in 0..s.n {
        for g in 0..s.groups {
            let (mut a, mut b) = (0f32, 0f32);
            for kk in 0..cg {
                let ch = g * cg + kk;
                a += gamma[ch] * sum_dzxh[n * s.c + ch];
                b += gamma[ch] * sum_dz[n * s.c + ch];
            }
            ca[n * s.groups + g] = a * inv_m;
            cb[n * s.groups + g] = b * inv_m;
        }
    }
    let dx = x
        .iter()
        .zip(dy)
        .enumerate()
        .map(|(i, (&xv, &dyv))| {
            let ch = i % s.c;
            let k = (i / (s.hw * s.c)) * s.groups + ch / cg;
            let r = rstd[k];
            let (dz, xh) = dz_of(xv, dyv, mean[k], r, gamma[ch], beta[ch], act);
            r * (dz * gamma[ch] - cb[k] - xh * ca[k])
        })
        .collect();
    Grads { dx, dgamma, dbeta }
}
