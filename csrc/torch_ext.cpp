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
// Every function returns 0, or -1 with libtorch's message in err.
#include <ATen/core/Tensor.h>
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

} // extern "C"
