// Errors at the call on an asynchronous device.
//
// CUDA checks an op's arguments on the host and raises at the call; only
// failures found while computing (an index value out of range) surface
// later. Our Meta kernels make most of those checks, but some live only in
// the CPU kernel the work item runs: a dtype the kernel does not implement,
// an option string, a mask or index of the wrong dtype, an output whose
// elements overlap. So the first call of an op with each argument
// *signature* (MetaCacheKey in KeyKind::kSignature: dtypes, ranks, overlap,
// integer/bool/string values) runs as a work item the host waits for, and
// the kernel's own exception (IndexError, NotImplementedError, ...) is
// raised at the call without poisoning the stream. Later calls with a
// signature that passed run asynchronously. Sizes and floating-point values
// are left out of signatures, so a training loop with changing shapes or a
// learning-rate schedule waits only during its first step; the few checks
// on those values are made on the host by call_checks.h.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "eager/meta_cache.h"

namespace torch_neuronx {

// Whether a call with this signature is run as a validating item: not yet
// validated on this thread (a bounded set, like the metadata cache). Never
// under NEURON_LAUNCH_BLOCKING=1, where every launch waits and raises at the
// op naming it.
bool shouldValidate(const MetaCacheKey& signature);

// What a validating work item leaves for the host: its kernel's exception
// and warnings, raised at the call as on the CPU.
struct ValidationResult {
  std::exception_ptr error;
  std::vector<c10::Warning> warnings;
};
using FailureSlot = std::shared_ptr<ValidationResult>;

// Runs `f` as device work. With a slot (a validating item, which the host
// waits for) the exception and warnings are stored there; without one an
// exception poisons the stream and surfaces at the next sync
// (run_on_device.h).
template <typename F>
void runOnDeviceInto(const FailureSlot& slot, F&& f);

// How many calls were validated so far (all threads): a training loop's
// count stops growing after its first step.
uint64_t validatedCallCount();

// On the host, after the item ran: its warnings, then its exception.
void raiseAtCall(const ValidationResult& result);

// After launching a validating item on `device`'s current stream: waits for
// it and marks `signature` validated, or raises the exception its kernel
// threw — after forgetting the metadata cached under `meta_key`, so that
// the same bad call made again is validated (and raises) again.
void finishValidation(c10::DeviceIndex device, const FailureSlot& slot,
                      const MetaCacheKey& signature,
                      const MetaCacheKey& meta_key);

}  // namespace torch_neuronx

#include "eager/run_on_device.h"

namespace torch_neuronx {

namespace detail {
class CollectWarnings final : public c10::WarningHandler {
 public:
  explicit CollectWarnings(std::vector<c10::Warning>* into) : into_(into) {}
  void process(const c10::Warning& w) override { into_->push_back(w); }

 private:
  std::vector<c10::Warning>* into_;
};
}  // namespace detail

template <typename F>
void runOnDeviceInto(const FailureSlot& slot, F&& f) {
  if (!slot) {
    runOnDevice(std::forward<F>(f));
    return;
  }
  slot->error = runOnDeviceCapturing([&] {
    detail::CollectWarnings collect(&slot->warnings);
    c10::WarningUtils::WarningHandlerGuard guard(&collect);
    f();
  });
}

}  // namespace torch_neuronx
