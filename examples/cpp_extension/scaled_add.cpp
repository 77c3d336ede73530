// A custom op for the neuron device, built on torch_neuronx's C++ API:
// neuron_example::scaled_add(a, b, alpha) = a + alpha * b, one fused kernel
// launched as one work item on the current neuron stream.
//
// Built and loaded by run.py (torch.utils.cpp_extension with
// torch_neuronx.cpp_extension's include and link flags); tested by
// tests/test_cpp_extension.py.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <torch_neuronx/neuron.h>

namespace {

at::Tensor scaled_add(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.device() == b.device(), "scaled_add: a is on ", a.device(),
              ", b on ", b.device());
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: a has shape ", a.sizes(),
              ", b ", b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "scaled_add: float32 tensors expected");
  // The op runs on the tensors' device, on its current stream.
  torch_neuronx::NeuronGuard guard(a.device());
  // contiguous() and empty_like() are neuron ops: their work is queued on the
  // same stream, before the kernel's.
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  at::Tensor out = at::empty_like(x);
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const int64_t n = x.numel();
  const float s = static_cast<float>(alpha);
  // Pointers, not tensors: x and y may be freed before the item runs; the
  // caching allocator reuses their memory only for later work on this stream.
  torch_neuronx::launchOnCurrentStream("neuron_example::scaled_add", [=] {
    for (int64_t i = 0; i < n; ++i) po[i] = px[i] + s * py[i];
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(neuron_example, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(neuron_example, PrivateUse1, m) {
  m.impl("scaled_add", &scaled_add);
}
