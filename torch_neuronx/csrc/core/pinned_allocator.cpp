#include "core/pinned_allocator.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace torch_neuronx {
namespace {

std::mutex g_mu;
std::map<const char*, size_t> g_live;  // start -> size

void freePinned(void* p) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_live.erase(static_cast<const char*>(p));
  }
  std::free(p);
}

}  // namespace

c10::DataPtr PinnedAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
  void* p = nullptr;
  // Page alignment, as page-locked memory has.
  TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 4096, nbytes) == 0,
                   "could not allocate ", nbytes,
                   " bytes of pinned host memory");
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_live[static_cast<const char*>(p)] = nbytes;
  }
  return c10::DataPtr(p, p, &freePinned, c10::Device(c10::kCPU));
}

c10::DeleterFnPtr PinnedAllocator::raw_deleter() const { return &freePinned; }

void PinnedAllocator::copy_data(void* dest, const void* src,
                                std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool PinnedAllocator::isPinned(const void* ptr) const {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_live.upper_bound(p);
  if (it == g_live.begin()) return false;
  --it;
  return p >= it->first && p < it->first + it->second;
}

PinnedAllocator& pinnedAllocator() {
  static PinnedAllocator* a = new PinnedAllocator();
  return *a;
}

}  // namespace torch_neuronx
