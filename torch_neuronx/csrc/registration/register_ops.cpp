// PrivateUse1 registrations. Thin on purpose: each line binds an ATen
// operator to the function that implements it; the logic lives in the
// files named in the includes.
#include <ATen/ATen.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "eager/device_op.h"
#include "eager/op_stats.h"
#include "eager/op_traits.h"
#include "eager/tensor_metadata.h"
#include "ops/convolution.h"
#include "ops/copy.h"
#include "ops/dropout.h"
#include "ops/histc.h"
#include "ops/layer_norm.h"
#include "ops/linear_backward.h"
#include "ops/rnn_cells.h"
#include "ops/scaled_mm.h"
#include "ops/sync_batch_norm.h"

namespace torch_neuronx {
namespace {

// Dense strided tensors on the CPU and on neuron can take each other's
// TensorImpl contents, as CPU and CUDA ones can. c10's own check only knows
// the built-in backends; without this, Module.to("neuron") would replace
// each parameter instead of setting its .data, breaking tied weights.
bool hasCompatibleShallowCopyType(const at::Tensor& self,
                                  const at::Tensor& from) {
  auto plain = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
           (t.is_cpu() || t.is_privateuseone());
  };
  if (plain(self) && plain(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(
      from.key_set());
}

at::Tensor& copyOp(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  return copyInto(self, src, non_blocking);
}

// Names of our own kernels, for get_executed_ops().
constexpr char kEmpty[] = "aten::empty.memory_format";
constexpr char kEmptyStrided[] = "aten::empty_strided";
constexpr char kResize[] = "aten::resize_";
constexpr char kCopy[] = "aten::copy_";
constexpr char kCopyFrom[] = "aten::_copy_from";
constexpr char kCopyFromAndResize[] = "aten::_copy_from_and_resize";
constexpr char kLocalScalarDense[] = "aten::_local_scalar_dense";
constexpr char kLinearBackward[] = "aten::linear_backward";
constexpr char kNativeDropout[] = "aten::native_dropout";
constexpr char kNativeDropoutBackward[] = "aten::native_dropout_backward";

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&deviceOpFallback>());
}

// Quantized tensors on neuron: refused at the call (op_traits.h).
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseQuantizedOp>());
}

// A CompositeImplicitAutograd op: its kernel sits on the autograd key.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type",
         TORCH_FN(hasCompatibleShallowCopyType));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Ops with both a CPU kernel and a generic composite one: a backend
  // without its own kernel would get the composite (a decomposition with
  // different rounding, and many more ops); the device runs the CPU kernel.
  constexpr auto generic = &deviceOpFallback;
  // The reduced losses' CPU out= kernel computes the unreduced loss into
  // `out` first (resizing it, with a warning); their functional CPU kernel
  // makes its own output.
  for (const char* op : {"mse_loss", "smooth_l1_loss"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<generic>());
  for (const char* op : {"addr", "addr.out", "native_group_norm", "narrow_copy",
                         "pixel_shuffle", "pixel_unshuffle", "_stack",
                         "_stack.out", "linalg__powsum", "mode.values"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<generic>());
  m.impl("convolution_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolutionOverrideable>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<
             &convolutionBackwardOverrideable>());
  // Integer inputs, which CUDA takes and the CPU kernel does not.
  m.impl("histc", TORCH_FN(histcOp));
  m.impl("histc.out", TORCH_FN(histcOut));
  // The fused RNN cells ATen's LSTM and GRU call on every device but the
  // CPU (no CPU kernel).
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fusedLstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl",
         TORCH_FN(fusedLstmCellBackwardImpl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fusedGruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fusedGruCellBackward));
  // nn.SyncBatchNorm's statistics ops (CUDA-only in ATen).
  m.impl("batch_norm_stats", TORCH_FN(batchNormStats));
  m.impl("batch_norm_elemt", TORCH_FN(batchNormElemt));
  m.impl("batch_norm_elemt.out", TORCH_FN(batchNormElemtOut));
  m.impl("batch_norm_gather_stats", TORCH_FN(batchNormGatherStats));
  m.impl("batch_norm_gather_stats_with_counts",
         TORCH_FN(batchNormGatherStatsWithCounts));
  m.impl("batch_norm_backward_reduce", TORCH_FN(batchNormBackwardReduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(batchNormBackwardElemt));
  // MX block scales computed here; tensor-/row-wise scales on the CPU kernel.
  m.impl("_scaled_mm", torch::CppFunction::makeFromBoxedFunction<&scaledMm>());
  // Linear's gradients in one call (TorchNeuron and MPS have it).
  m.impl("linear_backward",
         TORCH_FN((Noted<kLinearBackward, &linearBackward>::call)));
  // Dropout's fused op, computing the CPU's numbers (ops/dropout.h).
  m.impl("native_dropout",
         TORCH_FN((Noted<kNativeDropout, &nativeDropout>::call)));
  m.impl(
      "native_dropout_backward",
      TORCH_FN((Noted<kNativeDropoutBackward, &nativeDropoutBackward>::call)));
  // ATen's CPU layer-norm kernels straight into device memory.
#if TORCH_NEURONX_HAS_CPU_STUBS
  m.impl("native_layer_norm", TORCH_FN(nativeLayerNorm));
  m.impl("native_layer_norm_backward", TORCH_FN(nativeLayerNormBackward));
#else
  m.impl("native_layer_norm",
         torch::CppFunction::makeFromBoxedFunction<generic>());
#endif
  // Factories and metadata.
  m.impl("empty.memory_format",
         TORCH_FN((Noted<kEmpty, &emptyMemoryFormat>::call)));
  m.impl("empty_strided",
         TORCH_FN((Noted<kEmptyStrided, &emptyStridedOp>::call)));
  m.impl("resize_", TORCH_FN((Noted<kResize, &resizeOp>::call)));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(setStorageOffset));
  m.impl("set_.source_Storage", TORCH_FN(setStorage));
  m.impl("set_.source_Tensor", TORCH_FN(setTensor));
  m.impl("set_", TORCH_FN(setEmpty));
  m.impl("is_set_to", TORCH_FN(isSetTo));
  m.impl("record_stream", TORCH_FN(recordStreamOp));
  // Views: metadata only, shared with every strided backend.
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  // Copies and host reads.
  m.impl("copy_", TORCH_FN((Noted<kCopy, &copyOp>::call)));
  m.impl("_copy_from", TORCH_FN((Noted<kCopyFrom, &copyFrom>::call)));
  m.impl("_copy_from_and_resize",
         TORCH_FN((Noted<kCopyFromAndResize, &copyFromAndResize>::call)));
  m.impl("_local_scalar_dense",
         TORCH_FN((Noted<kLocalScalarDense, &localScalarDense>::call)));
}

}  // namespace torch_neuronx
