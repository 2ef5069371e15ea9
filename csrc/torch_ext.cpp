// The two libtorch entry points imgctl needs and tch 0.20 does not expose.
//
// 1. Post-accumulate-grad hooks, for data parallelism. Overlapping the
// gradient all-reduce with backward needs "this parameter's .grad is final".
// libtorch has exactly that seam, the tensor's post-accumulate-grad hook (the C++ side of
// torch.Tensor.register_post_accumulate_grad_hook), which the autograd engine
// calls right after AccumulateGrad has written the gradient. This file sets
// one hook per parameter that calls back into Rust with the parameter's index.
//
// The callback runs on the autograd thread (the caller's thread on the CPU,
// the device thread on a GPU) while backward is still running; it must not
// block and must not unwind (the Rust side catches panics).
//
// 2. Tensor::pin_memory() without a device argument: tch 0.20 always passes
// one, which torch 2.7+ deprecates with a warning on every call.
//
// 3. The fused AdamW kernel (aten::_fused_adamw_, what torch.optim.AdamW runs
// with fused=True): one pass over parameters, gradients and both moments
// instead of the ten elementwise kernels the update takes through tch.
//
// 4. The CUDA caching allocator's statistics (what torch.cuda.max_memory_allocated
// and max_memory_reserved read): through c10::DeviceAllocator, which exists from
// torch 2.9 on. Older headers (torch 2.7) compile a stub that says so (-2); the
// class they have instead needs the CUDA toolkit's headers.
//
// 5. TF32 for CUDA fp32 matmuls on and off (torch.backends.cuda.matmul.allow_tf32),
// for verify's func.matmul_tf32.
//
// 6. libtorch's Kineto profiler (what torch.profiler drives), so a benchmark
// can write a Chrome trace of imgctl's own step: where its GPU time goes.
//
// Every function returns 0, or -1 with libtorch's message in err.
#include <ATen/Context.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <ATen/core/Tensor.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define IMGCTL_DEVICE_STATS 1
#include <c10/core/CachingDeviceAllocator.h>
#endif
#include <ATen/ops/_fused_adamw.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <optional>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>

extern "C" {
typedef void (*imgctl_grad_ready_fn)(void *ctx, int64_t index);
}

namespace {

struct GradReadyHook final : torch::autograd::PostAccumulateGradHook {
  GradReadyHook(imgctl_grad_ready_fn fn, void *ctx, int64_t index)
      : fn_(fn), ctx_(ctx), index_(index) {}
  void operator()(const torch::autograd::Variable & /*tensor*/) override {
    fn_(ctx_, index_);
  }
  imgctl_grad_ready_fn fn_;
  void *ctx_;
  int64_t index_;
};

int fail(const std::exception &e, char *err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, e.what(), err_len - 1);
    err[err_len - 1] = '\0';
  }
  return -1;
}

int fail_unknown(char *err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, "unknown C++ exception", err_len - 1);
    err[err_len - 1] = '\0';
  }
  return -1;
}

} // namespace

extern "C" {

// Sets the post-accumulate-grad hook of `tensor` (a tch tensor, i.e. a
// at::Tensor*, which is torch::Tensor): after each backward that reaches it, fn(ctx, index) runs.
// Replaces an earlier hook of this tensor. Returns 0, or -1 with the reason in
// err (a leaf that does not require grad, for instance).
int imgctl_set_grad_ready_hook(void *tensor, imgctl_grad_ready_fn fn,
                               void *ctx, int64_t index, char *err,
                               size_t err_len) {
  try {
    const auto &t = *static_cast<at::Tensor *>(tensor);
    TORCH_CHECK(t.defined(), "undefined tensor");
    TORCH_CHECK(t.requires_grad() && t.is_leaf(),
                "a gradient hook needs a leaf tensor that requires grad");
    torch::autograd::impl::set_post_acc_grad_hooks(
        t, std::make_unique<GradReadyHook>(fn, ctx, index));
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// Removes the post-accumulate-grad hook of `tensor`, if any. Returns 0 or -1.
int imgctl_clear_grad_ready_hook(void *tensor, char *err, size_t err_len) {
  try {
    const auto &t = *static_cast<at::Tensor *>(tensor);
    TORCH_CHECK(t.defined(), "undefined tensor");
    torch::autograd::impl::set_post_acc_grad_hooks(t, nullptr);
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// A copy of `tensor` (a CPU tensor) in page-locked memory from torch's
// pinned-memory cache, as a new heap at::Tensor* in *out (tch takes it over).
int imgctl_pin_memory(void *tensor, void **out, char *err, size_t err_len) {
  try {
    const auto &t = *static_cast<at::Tensor *>(tensor);
    *out = new at::Tensor(t.pin_memory());
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// One AdamW step over single flat tensors (tch tensors, i.e. at::Tensor*):
// param, grad, exp_avg and exp_avg_sq of one dtype and device, and step, a
// float scalar tensor on that device already holding the new step count. With
// grad_scale (a float scalar tensor, or null) the gradient is divided by it
// first (and left so in grad).
int imgctl_fused_adamw(void *param, void *grad, void *exp_avg,
                       void *exp_avg_sq, void *step, void *grad_scale,
                       double lr, double beta1, double beta2,
                       double weight_decay, double eps, char *err,
                       size_t err_len) {
  try {
    auto t = [](void *p) -> const at::Tensor & {
      return *static_cast<at::Tensor *>(p);
    };
    std::optional<at::Tensor> scale;
    if (grad_scale != nullptr) {
      scale = t(grad_scale);
    }
    at::_fused_adamw_({t(param)}, {t(grad)}, {t(exp_avg)}, {t(exp_avg_sq)},
                      {}, {t(step)}, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, scale,
                      /*found_inf=*/std::nullopt);
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// The CUDA caching allocator's byte counts for `device`, in out[0..4]:
// allocated now, allocated peak, reserved now, reserved peak (all pools).
// With reset != 0, the peaks are reset after reading. Returns -2 when this
// libtorch has no device-allocator interface (before torch 2.9).
int imgctl_cuda_memory_stats(int64_t device, int reset, int64_t *out,
                             char *err, size_t err_len) {
#ifdef IMGCTL_DEVICE_STATS
  try {
    auto *alloc = c10::getDeviceAllocator(c10::DeviceType::CUDA);
    auto idx = static_cast<c10::DeviceIndex>(device);
    const auto stats = alloc->getDeviceStats(idx);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out[0] = stats.allocated_bytes[agg].current;
    out[1] = stats.allocated_bytes[agg].peak;
    out[2] = stats.reserved_bytes[agg].current;
    out[3] = stats.reserved_bytes[agg].peak;
    if (reset != 0) {
      alloc->resetPeakStats(idx);
    }
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
#else
  (void)device;
  (void)reset;
  (void)out;
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, "this libtorch (before 2.9) has no device-allocator statistics", err_len - 1);
    err[err_len - 1] = '\0';
  }
  return -2;
#endif
}

// Sets how CUDA fp32 matmuls run: mode 1 on TF32 tensor cores, 0 in IEEE
// fp32, 2 as torch's generic setting says (torch >= 2.9 only). *previous gets
// the mode in force before, to restore it with a second call.
int imgctl_cuda_matmul_tf32(int mode, int *previous, char *err, size_t err_len) {
  try {
    auto &ctx = at::globalContext();
#ifdef IMGCTL_DEVICE_STATS
    using at::Float32Backend;
    using at::Float32Op;
    using at::Float32Precision;
    const auto before = ctx.float32Precision(Float32Backend::CUDA, Float32Op::MATMUL);
    *previous = before == Float32Precision::TF32 ? 1 : before == Float32Precision::IEEE ? 0 : 2;
    const auto want = mode == 1 ? Float32Precision::TF32
                      : mode == 0 ? Float32Precision::IEEE
                                  : Float32Precision::NONE;
    ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::MATMUL, want);
#else
    *previous = ctx.allowTF32CuBLAS() ? 1 : 0;
    ctx.setAllowTF32CuBLAS(mode == 1);
#endif
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// Starts the Kineto profiler on this thread's CPU ops and, with cuda != 0,
// the CUDA kernels and copies.
int imgctl_profiler_start(int cuda, char *err, size_t err_len) {
  try {
    using torch::profiler::impl::ActivityType;
    using torch::profiler::impl::ProfilerConfig;
    using torch::profiler::impl::ProfilerState;
    const ProfilerConfig config(ProfilerState::KINETO);
    std::set<ActivityType> activities{ActivityType::CPU};
    if (cuda != 0) {
      activities.insert(ActivityType::CUDA);
    }
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

// Stops the profiler and writes its Chrome trace (JSON) to path.
int imgctl_profiler_stop(const char *path, char *err, size_t err_len) {
  try {
    auto result = torch::autograd::profiler::disableProfiler();
    if (result && path != nullptr) {
      result->save(path);
    }
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

} // extern "C"
