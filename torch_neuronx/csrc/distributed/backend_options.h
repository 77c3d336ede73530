// The `neuron` backend's options: c10d's Backend::Options as a type of its
// own, so torch.distributed's Python code (split_group deep-copies the
// parent's `options`) and c10d's splitGroup (torch 2.14 clones the parent's
// getBackendOptions() for each child) copy them whole.
#pragma once

#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace torch_neuronx {

struct NeuronBackendOptions final : c10d::Backend::Options {
  explicit NeuronBackendOptions(std::chrono::milliseconds timeout)
      : Options("neuron", timeout) {}
  NeuronBackendOptions(const NeuronBackendOptions&) = default;

  // torch 2.14 added Options::clone() (virtual; a subclass that does not
  // override it is copied as the base type). Declared without `override` so
  // the same header builds against torch 2.13, which has no clone() to
  // override; there it is only called by the Python binding's __deepcopy__.
  // NOLINTNEXTLINE(modernize-use-override)
  virtual c10::intrusive_ptr<c10d::Backend::Options> clone() const {
    return c10::make_intrusive<NeuronBackendOptions>(*this);
  }
};

}  // namespace torch_neuronx
