#include "aten/cpu_alias.h"

#include <c10/core/TensorImpl.h>

namespace torch_neuronx {
namespace {

void noDelete(void*) {}

}  // namespace

at::Tensor AliasSet::alias(const at::Tensor& t) {
  if (!t.defined()) return t;
  const c10::Storage& cpu = cpu_storages_.get(t, [](const at::Tensor& d) {
    void* data = const_cast<void*>(d.storage().data());
    return c10::Storage(
        c10::Storage::use_byte_size_t(), d.storage().nbytes(),
        c10::DataPtr(data, data, &noDelete, c10::Device(c10::kCPU)),
        /*allocator=*/nullptr, /*resizable=*/false);
  });
  return tensorOver(cpu, c10::DispatchKey::CPU, t);
}

}  // namespace torch_neuronx
