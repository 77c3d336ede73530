// The operators TorchNeuron runs on the host instead of the device (its CPU
// fallbacks): the linear-algebra decompositions. Here every op's kernel is the
// CPU's, so these are the ones a user porting a model must know about: the op
// reports list them as fallbacks (op_stats.cpp) and the Trainium estimate
// charges them a round trip to the host (profiler/op_cost.cpp).
#pragma once

#include <string_view>

namespace torch_neuronx {

// `name` is "aten::linalg_qr" or one of its overloads ("aten::linalg_qr.out").
bool isHostFallbackOp(std::string_view name);

}  // namespace torch_neuronx
