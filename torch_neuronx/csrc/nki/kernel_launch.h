// How an NKI kernel runs: its traced tile program (a checked, planned and
// timed neuron_rt::nki::Program) runs on host memory on the calling thread,
// or is launched as ONE work item on the current stream of a neuron device.
// While a profile records device items, the item carries the cost model's
// estimate for the profiler's target, and each engine the kernel keeps busy
// is a child of it.
#pragma once

#include <c10/core/Device.h>
#include <neuron_runtime/hardware_table.h>
#include <neuron_runtime/nki/program.h>

#include <memory>
#include <string>
#include <vector>

namespace torch_neuronx {

// Runs the program over `addresses` (one per kernel tensor: NumPy arrays,
// CPU tensors) on the calling thread. A check only the data reveals raises
// neuron_rt::nki::ProgramError.
void runKernelOnHost(const neuron_rt::nki::Program& program,
                     const std::vector<void*>& addresses);

// Queues the run as one work item labelled `label` ("nki::<kernel>") on the
// current stream of `device`. `locations`: the kernel lines by location id,
// so that an error only the data reveals (a device error, raised at the next
// synchronisation) names the line as well as the kernel.
void launchKernel(std::shared_ptr<const neuron_rt::nki::Program> program,
                  std::vector<void*> addresses, c10::DeviceIndex device,
                  const std::string& label, std::vector<std::string> locations);

// The cost model's estimate of the program on `target`: the program's own
// profile for kDefaultTarget, estimated again for another (with the
// program's SBUF and PSUM high-water marks, which no target changes).
neuron_rt::nki::Profile kernelProfile(const neuron_rt::nki::Program& program,
                                      neuron_rt::Target target);

}  // namespace torch_neuronx
