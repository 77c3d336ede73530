#include "profiler/registration.h"

namespace torch_neuronx::profiler {

void registerProfiler() {
  registerKinetoPlugin();
  registerProfilerStubs();
}

}  // namespace torch_neuronx::profiler
