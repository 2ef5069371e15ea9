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
// 7. Activation checkpointing (torch.utils.checkpoint): a custom autograd
// function whose forward runs a Rust callback without recording a graph and
// whose backward reruns it with grad on (same RNG and autocast state) and
// differentiates the rerun. See imgctl_checkpoint below.
//
// Every function returns 0, or -1 with libtorch's message in err.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
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
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>

extern "C" {
typedef void (*imgctl_grad_ready_fn)(void *ctx, int64_t index);
// A checkpointed computation: reads n tensors (at::Tensor*, borrowed) and
// hands each output to imgctl_tensor_vec_push(outputs, tensor). Returns 0, or
// -1 with a message in err; it must not unwind.
typedef int (*imgctl_ckpt_run_fn)(void *ctx, void *const *inputs, int64_t n,
                                  void *outputs, char *err, size_t err_len);
// Frees the computation's context (called once, when no graph needs it).
typedef void (*imgctl_ckpt_drop_fn)(void *ctx);
// Receives one output as a new heap at::Tensor* (the receiver owns it).
typedef void (*imgctl_tensor_sink_fn)(void *sink, void *tensor);
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

// The Rust computation of one checkpointed block, kept alive by the autograd
// graph (in the function's saved_data, as a capsule) until backward has run
// or the graph is freed; its destructor frees the Rust side.
struct CheckpointClosure final : torch::CustomClassHolder {
  CheckpointClosure(imgctl_ckpt_run_fn run, imgctl_ckpt_drop_fn drop, void *ctx)
      : run_(run), drop_(drop), ctx_(ctx) {}
  ~CheckpointClosure() override {
    if (drop_ != nullptr) {
      drop_(ctx_);
    }
  }
  CheckpointClosure(const CheckpointClosure &) = delete;
  CheckpointClosure &operator=(const CheckpointClosure &) = delete;

  std::vector<at::Tensor> run(const std::vector<at::Tensor> &inputs) const {
    std::vector<void *> ptrs;
    ptrs.reserve(inputs.size());
    for (const auto &t : inputs) {
      ptrs.push_back(const_cast<at::Tensor *>(&t));
    }
    std::vector<at::Tensor> outputs;
    char err[512] = {0};
    if (run_(ctx_, ptrs.data(), static_cast<int64_t>(ptrs.size()), &outputs, err,
             sizeof err) != 0) {
      throw std::runtime_error(std::string("checkpointed block failed: ") + err);
    }
    return outputs;
  }

  imgctl_ckpt_run_fn run_;
  imgctl_ckpt_drop_fn drop_;
  void *ctx_;
};

// The default generators' states (the CPU's and each device's an input lives
// on): what torch.utils.checkpoint's preserve_rng_state saves, so dropout in
// the recomputation draws the same numbers as in the forward.
struct RngStates {
  std::vector<c10::Device> devices;
  std::vector<at::Tensor> states;

  static RngStates take(const std::vector<c10::Device> &devices) {
    RngStates s;
    s.devices = devices;
    for (const auto &d : devices) {
      at::Generator gen = at::globalContext().defaultGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      s.states.push_back(gen.get_state());
    }
    return s;
  }

  void restore() const {
    for (size_t i = 0; i < devices.size(); ++i) {
      at::Generator gen = at::globalContext().defaultGenerator(devices[i]);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(states[i]);
    }
  }
};

// The CPU, then each accelerator device an input lives on, once.
std::vector<c10::Device> rng_devices(const std::vector<at::Tensor> &inputs) {
  std::vector<c10::Device> out{c10::Device(c10::DeviceType::CPU)};
  for (const auto &t : inputs) {
    if (!t.defined() || t.device().is_cpu()) {
      continue;
    }
    const auto d = t.device();
    bool seen = false;
    for (const auto &o : out) {
      seen |= o == d;
    }
    if (!seen) {
      out.push_back(d);
    }
  }
  return out;
}

// Autocast on a device type, as torch.utils.checkpoint records it for the
// recomputation (which runs on the autograd thread, without the caller's TLS).
struct AutocastState {
  bool cuda = false;
  at::ScalarType cuda_dtype = at::kHalf;
  bool cpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16;

  static AutocastState current() {
    AutocastState s;
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    return s;
  }

  void apply() const {
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
  }
};

// Sets an autocast state for a scope and puts the one before back.
struct AutocastGuard {
  explicit AutocastGuard(const AutocastState &s) : before_(AutocastState::current()) {
    s.apply();
  }
  ~AutocastGuard() { before_.apply(); }
  AutocastGuard(const AutocastGuard &) = delete;
  AutocastGuard &operator=(const AutocastGuard &) = delete;
  AutocastState before_;
};

// torch.utils.checkpoint(use_reentrant=True, preserve_rng_state=True) as a C++
// autograd function. Inputs: the computation's arguments (the first n_args)
// then the parameters it reads (so their gradients are routed by autograd to
// their AccumulateGrad, hooks included). Forward runs the computation with
// grad off and saves only the inputs, the RNG and the autocast state;
// backward reruns it with grad on from detached copies of the arguments,
// under the saved RNG state (the current one is put back afterwards) and
// differentiates the rerun with torch::autograd::grad.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, at::TensorList inputs, int64_t n_args,
          const c10::intrusive_ptr<CheckpointClosure> &closure) {
    ctx->set_materialize_grads(false);
    std::vector<at::Tensor> args(inputs.begin(), inputs.begin() + n_args);
    const auto devices = rng_devices(args);
    const auto rng = RngStates::take(devices);
    const auto autocast = AutocastState::current();
    auto outputs = closure->run(args);
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["n_args"] = n_args;
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    ctx->saved_data["rng"] = c10::List<at::Tensor>(rng.states);
    std::vector<int64_t> dev_codes;
    for (const auto &d : devices) {
      dev_codes.push_back(static_cast<int64_t>(d.type()));
      dev_codes.push_back(static_cast<int64_t>(d.index()));
    }
    ctx->saved_data["rng_devices"] = c10::List<int64_t>(dev_codes);
    ctx->saved_data["autocast"] = c10::List<int64_t>(
        {autocast.cuda, static_cast<int64_t>(autocast.cuda_dtype), autocast.cpu,
         static_cast<int64_t>(autocast.cpu_dtype)});
    return outputs;
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto n_args = ctx->saved_data["n_args"].toInt();
    auto holder = ctx->saved_data["closure"].toCapsule();
    const auto *closure = static_cast<const CheckpointClosure *>(holder.get());

    RngStates rng;
    const auto codes = ctx->saved_data["rng_devices"].toIntList().vec();
    for (size_t i = 0; i + 1 < codes.size(); i += 2) {
      rng.devices.emplace_back(static_cast<c10::DeviceType>(codes[i]),
                               static_cast<c10::DeviceIndex>(codes[i + 1]));
    }
    rng.states = ctx->saved_data["rng"].toTensorList().vec();
    const auto ac = ctx->saved_data["autocast"].toIntList().vec();
    AutocastState autocast;
    autocast.cuda = ac[0] != 0;
    autocast.cuda_dtype = static_cast<at::ScalarType>(ac[1]);
    autocast.cpu = ac[2] != 0;
    autocast.cpu_dtype = static_cast<at::ScalarType>(ac[3]);

    std::vector<at::Tensor> args;
    args.reserve(n_args);
    for (int64_t i = 0; i < n_args; ++i) {
      auto d = saved[i].detach();
      d.requires_grad_(saved[i].requires_grad());
      args.push_back(d);
    }

    std::vector<at::Tensor> outputs;
    {
      // Fork the RNG: rerun under the forward's state, then continue from
      // the state backward found, as if the rerun never drew.
      const auto now = RngStates::take(rng.devices);
      rng.restore();
      try {
        AutocastGuard cast(autocast);
        at::AutoGradMode grad(true);
        outputs = closure->run(args);
      } catch (...) {
        now.restore();
        throw;
      }
      now.restore();
    }

    std::vector<at::Tensor> outs;
    std::vector<at::Tensor> grads;
    for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        outs.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    std::vector<at::Tensor> targets;
    std::vector<size_t> where;
    for (size_t i = 0; i < saved.size(); ++i) {
      const auto &t = static_cast<int64_t>(i) < n_args ? args[i] : saved[i];
      if (t.requires_grad()) {
        targets.push_back(t);
        where.push_back(i);
      }
    }
    // One gradient per forward input, the two non-tensor ones included.
    torch::autograd::variable_list result(saved.size() + 2);
    if (!outs.empty() && !targets.empty()) {
      auto g = torch::autograd::grad(outs, targets, grads, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) {
        result[where[k]] = g[k];
      }
    }
    return result;
  }
};

} // namespace

extern "C" {

// Appends `tensor` (at::Tensor*, borrowed) to `outputs` (the
// std::vector<at::Tensor> a checkpointed computation fills). Returns 0 or -1.
int imgctl_tensor_vec_push(void *outputs, void *tensor) {
  try {
    static_cast<std::vector<at::Tensor> *>(outputs)->push_back(
        *static_cast<at::Tensor *>(tensor));
    return 0;
  } catch (...) {
    return -1;
  }
}

// Runs run(ctx, inputs) as a checkpointed block: inputs are n_inputs tensors
// (at::Tensor*), the computation's n_args arguments first, then the
// parameters it reads. With grad on and an input that requires grad, the
// outputs' graph is one CheckpointFunction node that recomputes the block in
// backward; else the computation just runs. Each output goes to
// sink(sink_ctx, new at::Tensor*). This call owns ctx from the start:
// drop(ctx) runs exactly once, now on failure or without a graph, else when
// the graph is freed.
int imgctl_checkpoint(imgctl_ckpt_run_fn run, imgctl_ckpt_drop_fn drop, void *ctx,
                      void *const *inputs, int64_t n_inputs, int64_t n_args,
                      imgctl_tensor_sink_fn sink, void *sink_ctx, char *err,
                      size_t err_len) {
  c10::intrusive_ptr<CheckpointClosure> closure;
  try {
    closure = c10::make_intrusive<CheckpointClosure>(run, drop, ctx);
  } catch (const std::exception &e) {
    drop(ctx);
    return fail(e, err, err_len);
  }
  try {
    TORCH_CHECK(n_args >= 0 && n_args <= n_inputs, "bad checkpoint argument count");
    std::vector<at::Tensor> all;
    all.reserve(n_inputs);
    bool needs_grad = false;
    for (int64_t i = 0; i < n_inputs; ++i) {
      all.push_back(*static_cast<at::Tensor *>(inputs[i]));
      needs_grad |= all.back().requires_grad();
    }
    std::vector<at::Tensor> outputs;
    if (at::GradMode::is_enabled() && needs_grad) {
      outputs = CheckpointFunction::apply(at::TensorList(all), n_args, closure);
    } else {
      all.resize(n_args);
      outputs = closure->run(all);
    }
    closure.reset();
    for (const auto &t : outputs) {
      sink(sink_ctx, new at::Tensor(t));
    }
    return 0;
  } catch (const std::exception &e) {
    return fail(e, err, err_len);
  } catch (...) {
    return fail_unknown(err, err_len);
  }
}

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
// the CUDA kernels and copies; every allocation and free is recorded too
// (the trace's "[memory]" events, as torch.profiler's profile_memory=True),
// and each operator's input shapes (record_shapes=True).
int imgctl_profiler_start(int cuda, char *err, size_t err_len) {
  try {
    using torch::profiler::impl::ActivityType;
    using torch::profiler::impl::ProfilerConfig;
    using torch::profiler::impl::ProfilerState;
    const ProfilerConfig config(ProfilerState::KINETO,
                                /*report_input_shapes=*/true,
                                /*profile_memory=*/true);
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
