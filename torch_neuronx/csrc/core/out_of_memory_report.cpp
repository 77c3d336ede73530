#include "core/out_of_memory_report.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <limits>

namespace torch_neuronx {

std::string formatBytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", bytes / double(1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof(buf), "%.2f KiB", bytes / double(1ull << 10));
  else
    std::snprintf(buf, sizeof(buf), "%llu bytes",
                  static_cast<unsigned long long>(bytes));
  return buf;
}

void throwOutOfMemory(const OutOfMemoryFacts& f) {
  const uint64_t reserved_unused = f.reserved - f.allocated;
  std::string limit_info, advice =
                              "raise the per-core capacity with "
                              "TORCH_NEURONX_HBM_BYTES_PER_CORE.";
  if (f.limit != std::numeric_limits<uint64_t>::max()) {
    // As CUDA's message: the cap, not the device, may be what ran out.
    limit_info = " This process has a memory limit of " + formatBytes(f.limit) +
                 " (torch.neuron.set_per_process_memory_fraction(" +
                 c10::str(f.fraction) + ")): " + formatBytes(f.limit) +
                 " allowed;";
    advice = "raise the per-process memory fraction limit.";
  }
  TORCH_CHECK_WITH(
      OutOfMemoryError, false, "neuron out of memory. Tried to allocate ",
      formatBytes(f.requested), " on neuron:", static_cast<int>(f.device),
      ". neuron:", static_cast<int>(f.device), " has a total capacity of ",
      formatBytes(f.capacity), " of which ", formatBytes(f.free), " is free.",
      limit_info, " Of the allocated memory ", formatBytes(f.allocated),
      " is allocated by PyTorch, and ", formatBytes(reserved_unused),
      " is reserved by PyTorch but unallocated. Free tensors you no longer "
      "need and call torch.neuron.empty_cache(), or ",
      advice);
}

}  // namespace torch_neuronx
