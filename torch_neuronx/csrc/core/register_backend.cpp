// Registers the neuron backend's device-level pieces with c10/ATen: the
// device guard, the hooks, the device allocator and the host (pinned)
// allocator.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>

#include "core/caching_allocator.h"
#include "core/guard_impl.h"
#include "core/hooks.h"
#include "core/pinned_allocator.h"

namespace torch_neuronx {

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// Once, whichever comes first: the bindings module's import or
// torch_neuronx::init() (torch_neuronx/device.h) in a program without Python.
void registerBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerHooks();
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &cachingAllocator());
    registerPinnedAllocator();
  });
}

}  // namespace torch_neuronx
