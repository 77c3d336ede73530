// How a compiled graph (an Inductor program) runs on the device: everything
// its wrapper queues on the stream between begin() and end() — its C++
// kernels and the eager ops it calls (matmuls, fallbacks) — becomes ONE work
// item on that stream (a runtime batch; see neuron_runtime/stream.h), named
// after the program. Errors surface at the next synchronisation naming the
// program and the step that failed; one raised during a call (under
// NEURON_LAUNCH_BLOCKING=1, or at a host wait that cut the program) is the
// program's own when queuedByCall() says the failing item is one of its
// steps (torch_neuronx/compile/program.py turns it into NEFFExecutionError).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_neuronx {

// What the profiler is told of a compiled kernel's call (only while it
// records device items): the bytes of its tensor arguments and the elements
// of the largest, one vector-engine operation each.
struct ProgramStepCost {
  double bytes = 0;
  double elements = 0;
};

class ProgramLaunch {
 public:
  ProgramLaunch(std::string name, c10::DeviceIndex device);

  // Opens the program on the current stream of its device. Under
  // NEURON_LAUNCH_BLOCKING=1 steps are not batched: each one waits and
  // raises at its own launch.
  void begin();
  // Queues what was held as one item (nothing waits for it).
  void end();

  // An argument of a compiled kernel: a device address or an int64 size
  // (passed alike), or a float32 scalar.
  struct KernelArg {
    int64_t i = 0;
    float f = 0;
    bool is_float = false;
  };
  using StepCost = ProgramStepCost;
  // True while a profile records device items: then callers of kernel()
  // fill its StepCost.
  static bool tracing();

  // Queues a call of the Inductor C++ kernel at `address` (an extern "C"
  // void function) with `args`, as `label`. `keep_alive`: host tensors whose
  // memory the kernel reads.
  void kernel(void* address, const char* label, std::vector<KernelArg> args,
              std::vector<at::Tensor> keep_alive, StepCost cost = {});

  // Was work item `seq` of `stream` on `device` queued by the last call
  // (begun by begin())? Items queued before it are not, whatever failed
  // since: an error of earlier work raised during a call is not the
  // program's.
  bool queuedByCall(int device, int stream, uint64_t seq) const {
    return device == device_ && stream == call_stream_ && seq > call_after_;
  }

  const std::string& name() const { return name_; }
  c10::DeviceIndex device() const { return device_; }
  uint64_t launches() const { return launches_; }

 private:
  std::string name_;
  const char* label_;  // name_, interned
  // "program=<name>", the program item's detail (made when first traced).
  std::shared_ptr<const std::string> detail_;
  c10::DeviceIndex device_;
  std::optional<c10::Stream> open_on_;
  int call_stream_ = -1;     // the stream of the last call
  uint64_t call_after_ = 0;  // its last item queued before that call
  uint64_t launches_ = 0;
};

}  // namespace torch_neuronx
