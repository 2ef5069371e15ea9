// Fused GroupNorm (+ SiLU) over channels-last (NHWC) activations, forward and
// backward. Compiled at run time by NVRTC (src/train/kernels/group_norm.rs),
// once per element type: -DIMGCTL_T=0 fp32, 1 bf16, 2 fp16. No header is
// included, so any NVRTC (12.x, 13.x) compiles it without an include path.
//
// x, y, dy, dx: [N, HW, C] contiguous (a [N, C, H, W] tensor in torch's
// channels_last format), C = G * CG. gamma, beta, dgamma, dbeta: fp32 [C].
// mean, rstd: fp32 [N, G]. Everything is accumulated in fp32.
//
// The reduction order is part of the contract: src/train/kernels/reference.rs
// replays it on the CPU, and a CPU test holds that replay against ATen's
// group_norm + silu. Change one, change the other.
//
// Per (n, g) reductions run one block of CG x BY threads (BY = max(1, 256 /
// CG)): thread (tx, ty) owns channel g*CG + tx and the pixels ty, ty + BY, ...
// in order; the block then combines its threads in shared memory as a tree
// over the flat index tid = ty*CG + tx (stride halving from the power of two
// at or above the thread count).

#ifndef IMGCTL_T
#error "compile with -DIMGCTL_T=0 (fp32), 1 (bf16) or 2 (fp16)"
#endif

#define MAX_THREADS 256

#if IMGCTL_T == 0
typedef float T;
__device__ __forceinline__ float ld(const T *p, long long i) { return p[i]; }
__device__ __forceinline__ void st(T *p, long long i, float v) { p[i] = v; }
#elif IMGCTL_T == 1
typedef unsigned short T;
__device__ __forceinline__ float ld(const T *p, long long i) {
  return __uint_as_float(((unsigned int)p[i]) << 16);
}
// Round to nearest even, NaN kept a (quiet) NaN: what ATen's bf16 cast does.
__device__ __forceinline__ void st(T *p, long long i, float v) {
  unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    p[i] = (T)((u >> 16) | 0x40u);
  } else {
    p[i] = (T)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}
#elif IMGCTL_T == 2
typedef unsigned short T;
__device__ __forceinline__ float ld(const T *p, long long i) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
  return f;
}
__device__ __forceinline__ void st(T *p, long long i, float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  p[i] = h;
}
#else
#error "IMGCTL_T must be 0, 1 or 2"
#endif

// Welford's running (count, mean, sum of squared deviations).
struct Welford {
  float n, mean, m2;
};

// Chan et al.'s merge of two partial Welford states.
__device__ __forceinline__ Welford merge(Welford a, Welford b) {
  if (b.n == 0.f) return a;
  if (a.n == 0.f) return b;
  Welford r;
  r.n = a.n + b.n;
  float d = b.mean - a.mean;
  float f = b.n / r.n;
  r.mean = a.mean + d * f;
  r.m2 = a.m2 + b.m2 + d * d * a.n * f;
  return r;
}

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The normalised value, the affine output z and d(out)/dz * dy.
__device__ __forceinline__ float dz_of(float xv, float dyv, float m, float r, float ga,
                                       float be, int silu, float *xhat) {
  float xh = (xv - m) * r;
  *xhat = xh;
  if (!silu) return dyv;
  float z = xh * ga + be;
  float s = 1.f / (1.f + expf(-z));
  return dyv * (s * (1.f + z * (1.f - s)));
}

// mean and rstd of each (n, g): grid N*G blocks of (CG, BY) threads.
extern "C" __global__ void gn_stats(const T *__restrict__ x, float *__restrict__ mean,
                                    float *__restrict__ rstd, int hw, int c, int cg,
                                    float eps) {
  __shared__ Welford sh[MAX_THREADS];
  const int groups = c / cg;
  const int n = blockIdx.x / groups, g = blockIdx.x % groups;
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  const int tid = ty * cg + tx, nt = cg * by;
  const T *base = x + (long long)n * hw * c + g * cg + tx;
  Welford w = {0.f, 0.f, 0.f};
  for (int p = ty; p < hw; p += by) {
    float v = ld(base, (long long)p * c);
    w.n += 1.f;
    float d = v - w.mean;
    w.mean += d / w.n;
    w.m2 += d * (v - w.mean);
  }
  sh[tid] = w;
  __syncthreads();
  for (int s = pow2_at_least(nt) / 2; s > 0; s >>= 1) {
    if (tid < s && tid + s < nt) sh[tid] = merge(sh[tid], sh[tid + s]);
    __syncthreads();
  }
  if (tid == 0) {
    mean[blockIdx.x] = sh[0].mean;
    rstd[blockIdx.x] = 1.f / sqrtf(sh[0].m2 / sh[0].n + eps);
  }
}

// y = [silu](xhat * gamma + beta), elementwise. Grid (ceil(C/32), pixel
// blocks, N) of (32, 8) threads: a thread owns one channel of one image and
// strides over the pixels, so no element pays an integer division.
extern "C" __global__ void gn_fwd(const T *__restrict__ x, const float *__restrict__ mean,
                                  const float *__restrict__ rstd,
                                  const float *__restrict__ gamma,
                                  const float *__restrict__ beta, T *__restrict__ y, int hw,
                                  int c, int cg, int silu) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const int n = blockIdx.z;
  const int s = n * (c / cg) + ch / cg;
  const float m = mean[s], r = rstd[s], ga = gamma[ch], be = beta[ch];
  const long long base = (long long)n * hw * c + ch;
  for (int p = blockIdx.y * blockDim.y + threadIdx.y; p < hw; p += gridDim.y * blockDim.y) {
    const long long i = base + (long long)p * c;
    float z = (ld(x, i) - m) * r * ga + be;
    st(y, i, silu ? z / (1.f + expf(-z)) : z);
  }
}

// Per (n, channel): sum of dz and of dz * xhat. Grid N*G blocks of (CG, BY).
extern "C" __global__ void gn_bwd_sums(const T *__restrict__ x, const T *__restrict__ dy,
                                       const float *__restrict__ mean,
                                       const float *__restrict__ rstd,
                                       const float *__restrict__ gamma,
                                       const float *__restrict__ beta,
                                       float *__restrict__ sum_dz,
                                       float *__restrict__ sum_dzxh, int hw, int c, int cg,
                                       int silu) {
  __shared__ float sa[MAX_THREADS];
  __shared__ float sb[MAX_THREADS];
  const int groups = c / cg;
  const int n = blockIdx.x / groups, g = blockIdx.x % groups;
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  const int ch = g * cg + tx;
  const float m = mean[blockIdx.x], r = rstd[blockIdx.x], ga = gamma[ch], be = beta[ch];
  const long long off0 = (long long)n * hw * c + ch;
  float a = 0.f, b = 0.f;
  for (int p = ty; p < hw; p += by) {
    const long long off = off0 + (long long)p * c;
    float xh;
    float dz = dz_of(ld(x, off), ld(dy, off), m, r, ga, be, silu, &xh);
    a += dz;
    b += dz * xh;
  }
  sa[ty * cg + tx] = a;
  sb[ty * cg + tx] = b;
  __syncthreads();
  for (int s = pow2_at_least(by) / 2; s > 0; s >>= 1) {
    if (ty < s && ty + s < by) {
      sa[ty * cg + tx] += sa[(ty + s) * cg + tx];
      sb[ty * cg + tx] += sb[(ty + s) * cg + tx];
    }
    __syncthreads();
  }
  if (ty == 0) {
    sum_dz[n * c + ch] = sa[tx];
    sum_dzxh[n * c + ch] = sb[tx];
  }
}

// Threads 0..C-1: dbeta[c] = sum_n sum_dz, dgamma[c] = sum_n sum_dzxh (n in
// order). Threads C..C+N*G-1: per (n, g), cb = sum gamma*sum_dz / M and
// ca = sum gamma*sum_dzxh / M over the group's channels in order (M = HW*CG).
extern "C" __global__ void gn_bwd_reduce(const float *__restrict__ sum_dz,
                                         const float *__restrict__ sum_dzxh,
                                         const float *__restrict__ gamma,
                                         float *__restrict__ dgamma,
                                         float *__restrict__ dbeta, float *__restrict__ ca,
                                         float *__restrict__ cb, int batch, int c, int cg,
                                         float inv_m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int groups = c / cg;
  if (i < c) {
    float a = 0.f, b = 0.f;
    for (int n = 0; n < batch; ++n) {
      a += sum_dzxh[n * c + i];
      b += sum_dz[n * c + i];
    }
    dgamma[i] = a;
    dbeta[i] = b;
  } else if (i < c + batch * groups) {
    const int s = i - c, n = s / groups, g = s % groups;
    float a = 0.f, b = 0.f;
    for (int k = 0; k < cg; ++k) {
      const int ch = g * cg + k;
      a += gamma[ch] * sum_dzxh[n * c + ch];
      b += gamma[ch] * sum_dz[n * c + ch];
    }
    ca[s] = a * inv_m;
    cb[s] = b * inv_m;
  }
}

// dx = rstd * (dz * gamma - cb - xhat * ca), elementwise; laid out as gn_fwd.
extern "C" __global__ void gn_bwd_dx(const T *__restrict__ x, const T *__restrict__ dy,
                                     const float *__restrict__ mean,
                                     const float *__restrict__ rstd,
                                     const float *__restrict__ gamma,
                                     const float *__restrict__ beta,
                                     const float *__restrict__ ca,
                                     const float *__restrict__ cb, T *__restrict__ dx, int hw,
                                     int c, int cg, int silu) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const int n = blockIdx.z;
  const int s = n * (c / cg) + ch / cg;
  const float m = mean[s], r = rstd[s], ga = gamma[ch], be = beta[ch];
  const float a = ca[s], b = cb[s];
  const long long base = (long long)n * hw * c + ch;
  for (int p = blockIdx.y * blockDim.y + threadIdx.y; p < hw; p += gridDim.y * blockDim.y) {
    const long long i = base + (long long)p * c;
    float xh;
    float dz = dz_of(ld(x, i), ld(dy, i), m, r, ga, be, silu, &xh);
    st(dx, i, r * (dz * ga - b - xh * a));
  }
}
