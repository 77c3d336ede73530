#include "amp/autocast_policy.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

// Ops CUDA's autocast lists name outside torch's shared list macros, which
// only exist from some torch version on: registered where the installed
// torch's headers declare them (a feature test, not a version test).
#if __has_include(<ATen/ops/linalg_matrix_sqrth.h>)
#include <ATen/ops/linalg_matrix_sqrth.h>
#define NEURON_HAS_LINALG_MATRIX_SQRTH 1
#endif

namespace torch_neuronx {

at::Tensor binaryCrossEntropyBanned(const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are "
      "unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy "
      "layer.\n"
      "In this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
      "BCEWithLogits are\n"
      "safe to autocast.");
}

// Ops on no list run unchanged: the key is skipped, not an error.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// The list macros take (OP) or (OP, OVERLOAD); these append the policy.
#define NEURON_LOWER_PRECISION_FP(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE spells its signatures with
// unqualified ATen type names.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // Matmul-like ops (convolutions, linear, bmm, attention, RNN cells).
  AT_FORALL_LOWER_PRECISION_FP(NEURON_LOWER_PRECISION_FP)
  // Ops that lose too much in low precision: pointwise transcendentals,
  // norms, losses, upsampling.
  AT_FORALL_FP32(NEURON_FP32)
  // Reductions and softmax: run in float32 unless a dtype is given.
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
  // norm overloads without a dtype redispatch to those with one.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(
      KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  // Multi-input ops run in the widest floating type among their inputs.
  AT_FORALL_PROMOTE(NEURON_PROMOTE)
  m.impl("binary_cross_entropy", TORCH_FN(binaryCrossEntropyBanned));
#ifdef NEURON_HAS_LINALG_MATRIX_SQRTH
  // torch 2.14: CUDA's autocast registers it fp32 by hand (autocast_mode.cpp).
  NEURON_FP32(linalg_matrix_sqrth)
#endif
}

#undef NEURON_LOWER_PRECISION_FP
#undef NEURON_FP32
#undef NEURON_FP32_SET_OPT_DTYPE
#undef NEURON_PROMOTE

}  // namespace torch_neuronx
