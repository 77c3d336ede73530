// What the generic device-op path knows about one operator, worked out from
// its schema once (the first call) and kept for the life of the process:
// its display name, which returns alias which arguments, which arguments are
// out=, the host checks and dtype widening it needs, and whether its Meta
// kernel can be trusted to describe the CPU kernel's outputs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "eager/call_checks.h"
#include "eager/meta_cache.h"

namespace torch_neuronx {

struct OpTraits {
  std::string name;
  bool meta_missing = false;  // Meta kernel absent: always run synchronously
  bool meta_differs = false;  // Meta kernel describes other outputs than CPU's
  bool sync_explained = false;
  // Corrects a Meta kernel's result where it follows CUDA, not CPU.
  void (*adjust_meta)(CachedMeta&, const std::vector<c10::IValue>&) = nullptr;
  // Dtypes computed in a wider dtype (dtype_widening.h).
  uint64_t widen_mask = 0;
  // Host checks of argument values (call_checks.h).
  CallCheck call_check = nullptr;
  // Op-stats generation this op was last recorded in.
  std::atomic<uint32_t> noted{0};
  bool tensor_returns_only = true;
  // Per return: index of the argument it aliases (-1 fresh), and whether the
  // alias is a write (in-place / out=) or a view.
  std::vector<int> alias_arg;
  std::vector<bool> alias_write;
  std::vector<bool> arg_is_out;
  // A random op (it takes a Generator; random_op.h), and whether its results
  // depend on the values of tensors it reads (not only on their shapes).
  bool draws_random = false;
  bool random_reads_values = false;
  // ATen has no CPU kernel for it (a CUDA-only op): the generic path, which
  // runs the CPU kernel on the device's memory, cannot run it.
  bool cpu_kernel_missing = false;
};

// The traits of `op`, built on its first call (thread-safe).
OpTraits& traitsFor(const c10::OperatorHandle& op);

// Raises NotImplementedError naming the op and the neuron device, as CUDA's
// dispatcher error names CUDA, for an op the device has no way to run.
[[noreturn]] void refuseUnsupportedOp(const OpTraits& traits);

// TORCH_NEURONX_LOG_SYNC_OPS=1 prints why an op took the synchronous path
// (once per op): a debugging aid for ops that stall the pipeline.
void explainSynchronous(OpTraits& traits, const char* why);

// Neuron tensors are dense and strided: an op whose result would have another
// layout (to_sparse, to_mkldnn, ...) is refused at the call, before anything
// is written, rather than handing back a dense tensor.
void checkStridedResult(const OpTraits& traits, c10::Layout layout);

// Quantized tensors are not supported on neuron (TorchNeuron lists them as
// unsupported): an op whose result would be quantized (quantize_per_tensor,
// quantize_per_channel, _make_per_tensor_quantized_tensor, ...) is refused at
// the call with NotImplementedError. Without this the op returned a plain
// tensor of dtype quint8 whose copy failed in a work item, and the error
// surfaced at the next, unrelated synchronisation.
void checkUnquantizedResult(const OpTraits& traits, c10::ScalarType dtype);

// The boxed kernel of the QuantizedPrivateUse1 key: every op dispatched there
// (a quantized dtype requested on neuron, a CPU quantized tensor moved or
// copied to neuron) raises NotImplementedError naming the op.
void refuseQuantizedOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuronx
