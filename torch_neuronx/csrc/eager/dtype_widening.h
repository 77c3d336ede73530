// Dtypes CUDA computes that the CPU kernels (the simulated core's compute
// engine) lack: the op runs in a wider dtype and its results are rounded
// back to the dtypes the op returns.
//
// Libraries are written against CUDA: transformers' MoE routing calls histc
// on integer ids, FFT and pooling code runs in half, complex32 tensors take
// part in element-wise math. CUDA's kernels compute these in a wider "opmath"
// type and round the result once, so computing in the wider dtype on the CPU
// kernels and rounding back gives CUDA's results.
//
// Which dtypes are widened, per op: complex32 for every computing op (the
// CPU has almost no complex32 kernels), plus a table of ops whose CPU kernel
// lacks float16/bfloat16 or bool where CUDA's has them (dtype_widening.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

namespace torch_neuronx {

// Bit (1 << ScalarType) set for each dtype `op` computes in a wider dtype.
// Looked up once per op.
uint64_t widenedDtypes(const c10::OperatorHandle& op);

// The operator of a schema name such as "aten::add.out".
c10::OperatorHandle operatorNamed(const char* name);

inline bool needsWidening(uint64_t mask, const at::Tensor& t) {
  return t.defined() && (mask >> static_cast<int>(t.scalar_type()) & 1) != 0;
}

// Runs `op` (arguments on the stack, as for a boxed kernel) with the tensors
// whose dtype is in `mask` converted to their wider dtype: the op is called
// again through the dispatcher, then tensors it wrote (in-place and out=
// arguments) are copied back into the caller's tensors and fresh results are
// converted to the dtypes the op returns for the original inputs. All of it
// is device work, ordered on the current stream.
void runWidened(const c10::OperatorHandle& op, uint64_t mask,
                torch::jit::Stack* stack);

}  // namespace torch_neuronx
