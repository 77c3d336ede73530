#include "adaptive/item_signature.h"

#include <neuron_runtime/fnv1a.h>

#include "eager/cpu_alias.h"

namespace torch_neuronx::adaptive {
namespace {

using neuron_rt::fnv1aMix;

// Never 0: 0 means unsigned.
uint64_t nonZero(uint64_t h) { return h ? h : 1; }

}  // namespace

void signFromPlan(const char* name, const AliasPlan& plan) {
  uint64_t h =
      fnv1aMix(neuron_rt::kFnv1aBasis, reinterpret_cast<uintptr_t>(name));
  for (int i = 0; i < plan.count(); ++i) {
    h = fnv1aMix(h, static_cast<uint64_t>(plan.itemsizeOf(i)));
    for (int64_t s : plan.sizesOf(i)) h = fnv1aMix(h, static_cast<uint64_t>(s));
    for (int64_t s : plan.stridesOf(i))
      h = fnv1aMix(h, static_cast<uint64_t>(s) + 7);
  }
  neuron_rt::signNextItem(nonZero(h));
}

}  // namespace torch_neuronx::adaptive
