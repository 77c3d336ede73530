#include "eager/op_item.h"

#include <ATen/ATen.h>

namespace torch_neuronx {

at::Tensor describeOperand(const AliasPlan& plan, int i) {
  const int storage = plan.storageOf(i);
  if (storage == -1) return at::Tensor();
  if (storage == -2) return plan.keptOf(i);
  return at::empty_strided(plan.sizesOf(i), plan.stridesOf(i),
                           at::TensorOptions()
                               .dtype(plan.dtypeOf(i))
                               .device(c10::Device(c10::kMeta)));
}

}  // namespace torch_neuronx
