// Autograd functions whose forward and backward are Rust callbacks, and
// torch's current CUDA stream: what imgctl's own CUDA kernels (compiled at
// run time by NVRTC, launched through the CUDA driver from Rust) need to take
// part in autograd and to run in stream order with torch's kernels.
//
// 1. imgctl_custom_function: a torch::autograd::Function whose forward calls
// fwd(ctx, inputs) -> (outputs, saved) and whose backward calls
// bwd(ctx, saved, grad_outputs) -> one gradient per input. ctx lives for the
// process (the Rust side leaks it); the callbacks must not unwind.
//
// 2. imgctl_cuda_current_stream: the cudaStream_t of torch's current stream
// on a device. Built without the CUDA toolkit's headers (the CPU-only and
// the wheel builds alike), so it goes through c10's device-generic
// interface: the default stream is the legacy stream 0; any other current
// stream (a side stream, a graph capture) is refused with a message, since
// naming it needs c10/cuda headers. Callers then fall back to ATen.
//
// Every function returns 0, or -1 with libtorch's message in err.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
// Forward: reads n borrowed at::Tensor* inputs; pushes each output to
// `outputs` and each tensor backward needs to `saved` (with
// imgctl_tensor_vec_push). Returns 0, or -1 with a message in err.
typedef int (*imgctl_fn_forward)(void *ctx, void *const *inputs, int64_t n, void *outputs,
                                 void *saved, char *err, size_t err_len);
// Backward: reads the saved tensors and one gradient per output (borrowed);
// pushes one gradient per input, in order (an undefined tensor for none).
typedef int (*imgctl_fn_backward)(void *ctx, void *const *saved, int64_t n_saved,
                                  void *const *grads, int64_t n_grads, void *grad_inputs,
                                  char *err, size_t err_len);
typedef void (*imgctl_tensor_sink_fn)(void *sink, void *tensor);
}

namespace {

int fn_fail(const char *what, char *err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, what, err_len - 1);
    err[err_len - 1] = '\0';
  }
  return -1;
}

struct RustFn final : torch::CustomClassHolder {
  RustFn(imgctl_fn_forward f, imgctl_fn_backward b, void *c) : fwd(f), bwd(b), ctx(c) {}
  imgctl_fn_forward fwd;
  imgctl_fn_backward bwd;
  void *ctx;
};

std::vector<void *> ptrs_of(const std::vector<at::Tensor> &ts) {
  std::vector<void *> out;
  out.reserve(ts.size());
  for (const auto &t : ts) {
    out.push_back(const_cast<at::Tensor *>(&t));
  }
  return out;
}

struct RustFunction : torch::autograd::Function<RustFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext *ctx,
                                                at::TensorList inputs,
                                                const c10::intrusive_ptr<RustFn> &fn) {
    std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    auto ptrs = ptrs_of(in);
    std::vector<at::Tensor> outputs, saved;
    char err[512] = {0};
    if (fn->fwd(fn->ctx, ptrs.data(), static_cast<int64_t>(ptrs.size()), &outputs, &saved,
                err, sizeof err) != 0) {
      throw std::runtime_error(std::string("custom forward failed: ") + err);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(fn);
    ctx->saved_data["n_inputs"] = static_cast<int64_t>(in.size());
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto holder = ctx->saved_data["fn"].toCapsule();
    const auto *fn = static_cast<const RustFn *>(holder.get());
    const auto n_inputs = ctx->saved_data["n_inputs"].toInt();
    auto saved_ptrs = ptrs_of(saved);
    std::vector<at::Tensor> g(grads.begin(), grads.end());
    auto grad_ptrs = ptrs_of(g);
    std::vector<at::Tensor> out;
    char err[512] = {0};
    if (fn->bwd(fn->ctx, saved_ptrs.data(), static_cast<int64_t>(saved_ptrs.size()),
                grad_ptrs.data(), static_cast<int64_t>(grad_ptrs.size()), &out, err,
                sizeof err) != 0) {
      throw std::runtime_error(std::string("custom backward failed: ") + err);
    }
    // One gradient per input tensor, and one (none) for the function object.
    torch::autograd::variable_list result(n_inputs + 1);
    for (int64_t i = 0; i < n_inputs && i < static_cast<int64_t>(out.size()); ++i) {
      result[i] = out[i];
    }
    return result;
  }
};

} // namespace

extern "C" {

// Applies the custom function (fwd, bwd, ctx) to n_inputs tensors
// (at::Tensor*, borrowed); each output goes to sink(sink_ctx, new at::Tensor*).
// With grad on and an input that requires grad, the outputs' graph is one
// node whose backward calls bwd; else fwd just runs.
int imgctl_custom_function(imgctl_fn_forward fwd, imgctl_fn_backward bwd, void *ctx,
                           void *const *inputs, int64_t n_inputs, imgctl_tensor_sink_fn sink,
                           void *sink_ctx, char *err, size_t err_len) {
  try {
    auto fn = c10::make_intrusive<RustFn>(fwd, bwd, ctx);
    std::vector<at::Tensor> all;
    all.reserve(n_inputs);
    for (int64_t i = 0; i < n_inputs; ++i) {
      all.push_back(*static_cast<at::Tensor *>(inputs[i]));
    }
    auto outputs = RustFunction::apply(at::TensorList(all), fn);
    for (const auto &t : outputs) {
      sink(sink_ctx, new at::Tensor(t));
    }
    return 0;
  } catch (const std::exception &e) {
    return fn_fail(e.what(), err, err_len);
  } catch (...) {
    return fn_fail("unknown C++ exception", err, err_len);
  }
}

// *out = torch's current CUDA stream on `device` as a cudaStream_t (see the
// note at the top: only the default stream, 0, can be named in this build).
int imgctl_cuda_current_stream(int64_t device, void **out, char *err, size_t err_len) {
  try {
    const auto *impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    const auto current = impl->getStream(dev);
    if (current != impl->getDefaultStream(dev)) {
      return fn_fail("torch's current CUDA stream is not the default stream, and this "
                     "build (without CUDA headers) cannot name another",
                     err, err_len);
    }
    *out = nullptr;
    return 0;
  } catch (const std::exception &e) {
    return fn_fail(e.what(), err, err_len);
  } catch (...) {
    return fn_fail("unknown C++ exception", err, err_len);
  }
}

} // extern "C"
