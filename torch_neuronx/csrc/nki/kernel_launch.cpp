#include "nki/kernel_launch.h"

#include <c10/util/Exception.h>
#include <neuron_runtime/nki/cost_model.h>
#include <neuron_runtime/trace.h>
#include <neuron_runtime/trainium_estimate.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

namespace nki = neuron_rt::nki;

void checkArity(const nki::Program& p, size_t addresses) {
  TORCH_CHECK(static_cast<int64_t>(addresses) == p.externals(),
              "NKI: the kernel takes ", p.externals(), " tensors, got ",
              addresses);
}

bool tracingItems() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

// The engines as the NKI documentation names them, by nki::Engine code. The
// trace keeps labels for the life of the process: these are literals.
constexpr const char* kEngineLabels[] = {
    "DMA", "Tensor Engine", "Vector Engine", "Scalar Engine", "GpSimd Engine"};
static_assert(sizeof(kEngineLabels) / sizeof(kEngineLabels[0]) == nki::kEngines,
              "an engine without a label");
static_assert(static_cast<int>(nki::Engine::kDma) == 0 &&
                  static_cast<int>(nki::Engine::kTensor) == 1 &&
                  static_cast<int>(nki::Engine::kVector) == 2 &&
                  static_cast<int>(nki::Engine::kScalar) == 3 &&
                  static_cast<int>(nki::Engine::kGpSimd) == 4,
              "kEngineLabels follows nki::Engine's order");

int64_t roundNs(double ns) { return static_cast<int64_t>(std::llround(ns)); }

// Describes the launch about to be queued: a kernel whose estimate is the
// cost model's total, its matmul flops and DMA traffic.
void noteKernel(const nki::Profile& prof, const std::string& label) {
  neuron_rt::ItemNote& n = neuron_rt::pendingNote();
  n.category = neuron_rt::ItemCategory::kKernel;
  n.set = true;
  n.estimate_ns = roundNs(prof.total_ns);
  n.flops = static_cast<double>(prof.matmul_flops);
  n.bytes = static_cast<double>(prof.dma_bytes);
  n.tensor_engine = prof.matmul_flops > 0;
  constexpr char kPrefix[] = "nki::";  // kernel.py's label
  const bool prefixed = label.rfind(kPrefix, 0) == 0;
  n.detail = std::make_shared<const std::string>(
      "kernel=" + (prefixed ? label.substr(sizeof(kPrefix) - 1) : label));
}

// On the worker, inside the traced item: each engine the kernel keeps busy,
// as a child carrying the cost model's busy time (engines overlap, so the
// children are estimates only; they take no measured time).
void traceEngines(const nki::Profile& prof) {
  neuron_rt::setRunningItemEstimate(roundNs(prof.total_ns));
  const int64_t now = neuron_rt::nowNs();
  for (int e = 0; e < nki::kEngines; ++e) {
    if (prof.busy_ns[e] <= 0) continue;
    neuron_rt::ItemNote n;
    n.category = neuron_rt::ItemCategory::kEngine;
    n.set = true;
    n.estimate_ns = roundNs(prof.busy_ns[e]);
    n.detail = std::make_shared<const std::string>(
        std::string("engine=") + nki::engineName(static_cast<nki::Engine>(e)) +
        ";instructions=" + std::to_string(prof.instructions[e]));
    neuron_rt::traceChild(kEngineLabels[e], now, now, std::move(n));
  }
}

}  // namespace

void runKernelOnHost(const nki::Program& program,
                     const std::vector<void*>& addresses) {
  checkArity(program, addresses.size());
  program.run(addresses.data());
}

void launchKernel(std::shared_ptr<const nki::Program> program,
                  std::vector<void*> addresses, c10::DeviceIndex device,
                  const std::string& label,
                  std::vector<std::string> locations) {
  checkArity(*program, addresses.size());
  // While a profile records device items: the kernel's cost model for the
  // profiler's target, for its item (set here) and its engines (on the
  // worker).
  std::shared_ptr<const nki::Profile> prof;
  if (tracingItems()) {
    prof = std::make_shared<const nki::Profile>(
        kernelProfile(*program, neuron_rt::trainiumModel().target));
    noteKernel(*prof, label);
  }
  launch(device, internLabel(label),
         [p = std::move(program), ptrs = std::move(addresses),
          locations = std::move(locations), prof = std::move(prof)] {
           try {
             p->run(ptrs.data());
           } catch (const nki::ProgramError& e) {
             const int32_t loc = e.loc();
             const bool known =
                 loc >= 0 && static_cast<size_t>(loc) < locations.size();
             throw std::runtime_error(
                 (known ? locations[loc] + ": " : std::string()) + e.what());
           }
           // (An item queued before the profile began has no figures of its
           // own: the program's, for the default target.)
           if (neuron_rt::tracingRunningItem())
             traceEngines(prof ? *prof : p->profile());
         });
}

nki::Profile kernelProfile(const nki::Program& program,
                           neuron_rt::Target target) {
  if (target == neuron_rt::kDefaultTarget) return program.profile();
  nki::Profile q = nki::estimateCost(program, nki::costParameters(target));
  q.sbuf_high_water = program.profile().sbuf_high_water;
  q.psum_high_water = program.profile().psum_high_water;
  return q;
}

}  // namespace torch_neuronx
