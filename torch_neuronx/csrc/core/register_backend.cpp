// Registers the neuron backend's device-level pieces with c10/ATen: the
// device guard, the hooks, the device allocator and the host (pinned)
// allocator.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/caching_allocator.h"
#include "core/guard_impl.h"
#include "core/hooks.h"
#include "core/pinned_allocator.h"

namespace torch_neuronx {

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

void registerBackend() {
  registerHooks();
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &cachingAllocator());
  registerPinnedAllocator();
}

}  // namespace torch_neuronx
