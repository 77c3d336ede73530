// torch._scaled_mm on neuron. Tensor-wise and row-wise scales run the CPU
// kernel, as every other op (eager/device_op.h). Microscaling (MX) block
// scales, which the CPU kernel refuses and CUDA runs on Blackwell (TorchAO's
// MXFP8/MXFP4 matmul path, KernelPreference.AUTO), are computed here: each
// operand decoded with its power-of-two block scales, multiplied in fp32.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_neuronx {

void scaledMm(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
              torch::jit::Stack* stack);

}  // namespace torch_neuronx
