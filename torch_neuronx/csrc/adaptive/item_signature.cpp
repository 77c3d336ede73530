#include "adaptive/item_signature.h"

#include <c10/util/accumulate.h>
#include <neuron_runtime/fnv1a.h>

#include <algorithm>

#include "core/compute_pool.h"
#include "eager/alias_plan.h"

namespace torch_neuronx::adaptive {
namespace {

using neuron_rt::fnv1aMix;

// Never 0: 0 means unsigned (2: a small item's).
uint64_t nonZero(uint64_t h) { return h ? h : 2; }

}  // namespace

void signFromPlan(const char* name, const AliasPlan& plan) {
  uint64_t h =
      fnv1aMix(neuron_rt::kFnv1aBasis, reinterpret_cast<uintptr_t>(name));
  int64_t largest = 0;
  for (int i = 0; i < plan.count(); ++i) {
    if (plan.itemsizeOf(i) > 0)
      largest = std::max(largest, c10::multiply_integers(plan.sizesOf(i)));
    h = fnv1aMix(h, static_cast<uint64_t>(plan.itemsizeOf(i)));
    for (int64_t s : plan.sizesOf(i)) h = fnv1aMix(h, static_cast<uint64_t>(s));
    for (int64_t s : plan.stridesOf(i))
      h = fnv1aMix(h, static_cast<uint64_t>(s) + 7);
  }
  // The lowest bit: a large item (neuron_rt::kLargeItem).
  neuron_rt::signNextItem(
      nonZero((h << 1) | (largest >= kSmallItemElements ? 1 : 0)));
}

}  // namespace torch_neuronx::adaptive
