// Ops that change only a neuron tensor's metadata or storage binding:
// resize_, set_, and the tensor factories. They queue no compute.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <optional>

namespace torch_neuronx {

at::Tensor emptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format);
at::Tensor emptyStridedOp(c10::IntArrayRef size, c10::IntArrayRef stride,
                          std::optional<c10::ScalarType> dtype,
                          std::optional<c10::Layout> layout,
                          std::optional<c10::Device> device,
                          std::optional<bool> pin_memory);

const at::Tensor& resizeOp(const at::Tensor& self, c10::IntArrayRef size,
                           std::optional<c10::MemoryFormat> memory_format);
at::Tensor& setStorageOffset(at::Tensor& self, c10::Storage source,
                             int64_t storage_offset, c10::IntArrayRef size,
                             c10::IntArrayRef stride);
at::Tensor& setStorage(at::Tensor& self, c10::Storage source);
at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& setEmpty(at::Tensor& self);
bool isSetTo(const at::Tensor& self, const at::Tensor& tensor);
void recordStreamOp(at::Tensor& self, c10::Stream stream);

}  // namespace torch_neuronx
