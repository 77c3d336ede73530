#include "eager/first_call_validation.h"

#include <atomic>
#include <unordered_set>
#include <vector>

#include "core/device.h"
#include "core/graph.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

constexpr size_t kMaxSignatures = 16384;

std::atomic<uint64_t> g_validated_calls{0};

using Validated = std::unordered_set<std::vector<int64_t>, KeyWordsHash>;

Validated& validated() {
  thread_local Validated v;
  return v;
}

}  // namespace

bool shouldValidate(const MetaCacheKey& signature) {
  // A captured item runs only when its graph is replayed: there is nothing
  // to wait for now, and a replay reports its errors as device errors.
  return !launchBlocking() && validated().count(signature.words()) == 0 &&
         !currentStreamCapturing(currentDevice());
}

uint64_t validatedCallCount() {
  return g_validated_calls.load(std::memory_order_relaxed);
}

void raiseAtCall(const ValidationResult& result) {
  for (const c10::Warning& w : result.warnings) c10::warn(w);
  if (result.error) std::rethrow_exception(result.error);
}

void finishValidation(c10::DeviceIndex device, const FailureSlot& slot,
                      const MetaCacheKey& signature,
                      const MetaCacheKey& meta_key) {
  g_validated_calls.fetch_add(1, std::memory_order_relaxed);
  synchronizeStream(currentStream(device));
  if (slot->error) forgetCachedMeta(meta_key);
  raiseAtCall(*slot);
  Validated& v = validated();
  if (v.size() >= kMaxSignatures) v.clear();
  v.insert(signature.words());
}

}  // namespace torch_neuronx
