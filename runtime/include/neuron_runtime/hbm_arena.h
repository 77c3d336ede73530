// One core's HBM: a contiguous address range with a fixed capacity.
//
// The range is reserved with mmap(MAP_NORESERVE), so only pages that device
// work touches cost host RAM; freed ranges are handed back to the OS. Running
// out of capacity is a returned status, never an abort. With
// TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1 the range is inaccessible to the host
// outside device work (device_memory_protection.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "neuron_runtime/status.h"

namespace neuron_rt {

class HbmArena {
 public:
  static constexpr size_t kAlignment = 4096;

  HbmArena(int device, uint64_t capacity);
  ~HbmArena();
  HbmArena(const HbmArena&) = delete;
  HbmArena& operator=(const HbmArena&) = delete;

  // Allocates `bytes` (rounded up to kAlignment). On failure returns
  // kOutOfMemory and leaves *out untouched.
  Status allocate(size_t bytes, void** out);
  // Frees a pointer returned by allocate(); returns its pages to the OS.
  void free(void* ptr);

  bool contains(const void* ptr) const;
  int device() const { return device_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t bytesInUse() const;
  uint64_t largestFreeRange() const;

 private:
  int device_;
  uint64_t capacity_;
  char* base_ = nullptr;
  bool protected_ = false;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::map<uint64_t, uint64_t> used_;                     // offset -> size
  uint64_t in_use_ = 0;

  void insertFree(uint64_t offset, uint64_t size);
  void eraseFree(std::map<uint64_t, uint64_t>::iterator it);
};

}  // namespace neuron_rt
