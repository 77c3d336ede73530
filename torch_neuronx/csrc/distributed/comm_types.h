// How torch dtypes and c10d reduce ops map onto the runtime communicator's
// element types and operators (neuron_runtime/collectives/types.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <neuron_runtime/collectives/types.h>

#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torch_neuronx {

namespace coll = neuron_rt::collectives;

// What the communicator reduces for a tensor: its element type, and how many
// elements each tensor element is (2 for complex numbers, reduced as pairs
// of reals). nullopt: a dtype the communicator cannot reduce.
struct CommElement {
  coll::DataType dtype;
  int per_element = 1;
};
std::optional<CommElement> reducibleAs(at::ScalarType t);
// The torch dtype of a communicator element type.
at::ScalarType scalarTypeOf(coll::DataType t);

// A reduce op on `t`, or a DistBackendError naming what is not supported
// (as NCCL: PREMUL_SUM on floating types only, AVG on all but bool, bitwise
// ops on integers and bool only).
coll::ReduceOp commReduceOp(const c10d::ReduceOp& op, at::ScalarType t);

// AVG's last step on a summed tensor, in place: integers are divided as C
// (and NCCL) divide them, truncating toward zero; other types exactly.
void divideForAverage(const at::Tensor& sum, int64_t ranks);

// PREMUL_SUM's factor when it is a double (a tensor factor is read by the
// work item from device memory); 1 for other ops.
double premulDoubleFactor(const c10d::ReduceOp& op);
// PREMUL_SUM's tensor factor, if it has one.
std::optional<at::Tensor> premulTensorFactor(const c10d::ReduceOp& op);

}  // namespace torch_neuronx
