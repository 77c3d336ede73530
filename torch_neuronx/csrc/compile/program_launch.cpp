#include "compile/program_launch.h"

#include <c10/util/Exception.h>
#include <ffi.h>
#include <neuron_runtime/trace.h>

#include <memory>
#include <stdexcept>
#include <utility>

#include "core/device.h"
#include "core/stream.h"
#include "profiler/device_timeline.h"

namespace torch_neuronx {
namespace {

// Calls `address(args...)` through libffi: Inductor's kernels take any number
// of pointers, int64 sizes and float scalars, known only at run time.
void callKernel(void* address,
                const std::vector<ProgramLaunch::KernelArg>& args,
                const char* label) {
  const size_t n = args.size();
  std::vector<ffi_type*> types(n);
  std::vector<void*> values(n);
  for (size_t k = 0; k < n; ++k) {
    types[k] = args[k].is_float ? &ffi_type_float : &ffi_type_sint64;
    values[k] = args[k].is_float
                    ? static_cast<void*>(const_cast<float*>(&args[k].f))
                    : static_cast<void*>(const_cast<int64_t*>(&args[k].i));
  }
  ffi_cif cif;
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, static_cast<unsigned>(n),
                   &ffi_type_void, types.data()) != FFI_OK)
    throw std::runtime_error(std::string("cannot call compiled kernel ") +
                             label);
  ffi_call(&cif, FFI_FN(address), nullptr, values.data());
}

}  // namespace

ProgramLaunch::ProgramLaunch(std::string name, c10::DeviceIndex device)
    : name_(std::move(name)), label_(internLabel(name_)), device_(device) {}

void ProgramLaunch::begin() {
  ++launches_;
  c10::Stream stream = currentStream(device_);
  neuron_rt::Stream& queue = runtimeStream(stream);
  call_stream_ = queue.id();
  call_after_ = queue.lastEnqueued();
  if (launchBlocking()) return;
  if (tracing()) {
    // The batch takes this as the program's note: not set, so its estimate
    // is the sum of its steps'.
    if (!detail_)
      detail_ = std::make_shared<const std::string>("program=" + name_);
    neuron_rt::ItemNote& n = neuron_rt::pendingNote();
    n.category = neuron_rt::ItemCategory::kProgram;
    n.set = false;
    n.pipelined = true;  // one program: its steps' DMA and compute overlap
    n.detail = detail_;
  }
  queue.beginBatch(label_);
  open_on_ = stream;
}

void ProgramLaunch::end() {
  if (!open_on_) return;
  c10::Stream stream = *open_on_;
  open_on_.reset();
  runtimeStream(stream).endBatch();
}

bool ProgramLaunch::tracing() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

void ProgramLaunch::kernel(void* address, const char* label,
                           std::vector<KernelArg> args,
                           std::vector<at::Tensor> keep_alive, StepCost cost) {
  if (tracing()) {
    // A step with a roofline estimate: Inductor's C++ kernels are pointwise
    // and reduction loops, memory traffic on the vector engines. (The
    // program's extern calls, matmuls and convolutions, are eager ops that
    // describe themselves.)
    neuron_rt::ItemNote& n = neuron_rt::pendingNote();
    n.category = neuron_rt::ItemCategory::kStep;
    n.set = true;
    n.bytes = cost.bytes;
    n.flops = cost.elements;
    n.tensor_engine = false;
    // Estimated as the eager path estimates an item, without a launch of
    // its own: the program is launched once (its note, begin()).
    neuron_rt::ItemWork w;
    w.flops = cost.elements;
    w.bytes = cost.bytes;
    w.launch = false;
    n.parts = neuron_rt::estimateItem(w, profiler::deviceModel());
    n.has_parts = true;
    n.estimate_ns = neuron_rt::roundedNs(n.parts);
  }
  launch(device_, label,
         [address, label, args = std::move(args),
          keep = std::move(keep_alive)] { callKernel(address, args, label); });
}

}  // namespace torch_neuronx
