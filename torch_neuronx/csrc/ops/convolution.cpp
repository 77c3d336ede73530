#include "ops/convolution.h"

#include "eager/device_op.h"

namespace torch_neuronx {

using c10::IValue;

// ATen sends convolutions on backends it does not know to the
// *_overrideable hooks, whose own (CompositeExplicitAutograd) kernels only
// throw, and would win over the fallback. The compute engine is ATen's CPU
// backend, so they run as the ops the CPU backend implements.
void convolutionOverrideable(const c10::OperatorHandle&, c10::DispatchKeySet ks,
                             torch::jit::Stack* stack) {
  static const c10::OperatorHandle conv =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  deviceOpFallback(conv, ks, stack);  // same arguments
}

void convolutionBackwardOverrideable(const c10::OperatorHandle& op,
                                     c10::DispatchKeySet ks,
                                     torch::jit::Stack* stack) {
  static const c10::OperatorHandle conv_backward =
      c10::Dispatcher::singleton().findSchemaOrThrow(
          "aten::convolution_backward", "");
  // convolution_backward also takes bias_sizes (after weight): the bias
  // gradient has one entry per channel of grad_output.
  const size_t nargs = op.schema().arguments().size();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(nargs);
  IValue bias_sizes;
  if (first[nargs - 1].toBoolList().get(2))
    bias_sizes = IValue(std::vector<int64_t>{first[0].toTensor().size(1)});
  stack->insert(first + 3, std::move(bias_sizes));
  deviceOpFallback(conv_backward, ks, stack);
}

}  // namespace torch_neuronx
