// The message of the caching allocator's OutOfMemoryError: CUDA's wording,
// with this device's figures, so that advice written for CUDA's message
// (and code matching it) applies to neuron's.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_neuronx {

// Human-readable formatting used in out-of-memory messages.
std::string formatBytes(uint64_t bytes);

// What the allocator knew when an allocation failed.
struct OutOfMemoryFacts {
  c10::DeviceIndex device;
  size_t requested;    // bytes asked for
  uint64_t capacity;   // the device's HBM
  uint64_t free;       // HBM that nothing holds
  uint64_t allocated;  // held by live tensors
  uint64_t reserved;   // held by the cache, allocated or not
  uint64_t limit;      // the per-process cap (uint64_t's max: none)
  double fraction;     // what the cap was set as
};

// Throws c10::OutOfMemoryError with the message for `facts`.
[[noreturn]] void throwOutOfMemory(const OutOfMemoryFacts& facts);

}  // namespace torch_neuronx
