#include "adaptive/item_signature.h"

#include "eager/cpu_alias.h"

namespace torch_neuronx::adaptive {
namespace {

constexpr uint64_t kPrime = 1099511628211ull;
constexpr uint64_t kBasis = 1469598103934665603ull;

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * kPrime; }

// Never 0: 0 means unsigned.
uint64_t nonZero(uint64_t h) { return h ? h : 1; }

}  // namespace

void signFromPlan(const char* name, const AliasPlan& plan) {
  uint64_t h = mix(kBasis, reinterpret_cast<uintptr_t>(name));
  for (int i = 0; i < plan.count(); ++i) {
    h = mix(h, static_cast<uint64_t>(plan.itemsizeOf(i)));
    for (int64_t s : plan.sizesOf(i)) h = mix(h, static_cast<uint64_t>(s));
    for (int64_t s : plan.stridesOf(i))
      h = mix(h, static_cast<uint64_t>(s) + 7);
  }
  neuron_rt::signNextItem(nonZero(h));
}

}  // namespace torch_neuronx::adaptive
