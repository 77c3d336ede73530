// Device storage: allocation of neuron tensors and resizing of their storage
// (Tensor.resize_, untyped_storage().resize_(), set_).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/StorageImpl.h>

#include <optional>

namespace torch_neuronx {

at::Tensor emptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        c10::ScalarType dtype, c10::DeviceIndex device);
at::Tensor emptyContiguous(
    c10::IntArrayRef size, c10::ScalarType dtype, c10::DeviceIndex device,
    c10::MemoryFormat format = c10::MemoryFormat::Contiguous);
// Grows or shrinks a neuron storage to `nbytes`, keeping the common prefix of
// its contents (copied on the device, in stream order). nbytes == 0 frees
// the memory (FSDP2 frees unsharded parameters this way).
void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_neuronx
