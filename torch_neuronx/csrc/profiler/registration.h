// The profiler subsystem's registration with torch.profiler, done once when
// the extension loads.
#pragma once

namespace torch_neuronx::profiler {

// The device timeline (the Kineto PrivateUse1 activity profiler,
// kineto_plugin.cpp) and the legacy profiler's stubs (profiler_stubs.cpp).
void registerProfiler();

void registerKinetoPlugin();
void registerProfilerStubs();

}  // namespace torch_neuronx::profiler
