#include "eager/synchronous_op.h"

#include <ATen/ATen.h>

#include <memory>

#include "core/compute_pool.h"
#include "core/storage.h"
#include "core/stream.h"
#include "eager/alias_plan.h"
#include "eager/cpu_call.h"
#include "eager/first_call_validation.h"
#include "eager/ivalue_tensors.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {

using c10::IValue;

void resizeLikeCpuResult(const at::Tensor& dst, const at::Tensor& cpu) {
  if (dst.sizes() == cpu.sizes()) return;
  dst.resize_(cpu.sizes());
  if (cpu.is_non_overlapping_and_dense())
    dst.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides(),
                                                     dst.storage_offset());
}

std::vector<IValue> placeCpuResults(const c10::FunctionSchema& schema,
                                    const OpTraits& traits,
                                    const std::vector<IValue>& args,
                                    const torch::jit::Stack& results,
                                    c10::DeviceIndex device,
                                    bool copy_out_args) {
  const size_t nret = schema.returns().size();
  TORCH_INTERNAL_ASSERT(results.size() == nret);
  // The plan holds (device output, CPU result) pairs.
  auto copies = std::make_shared<AliasPlan>();
  size_t num_copies = 0;
  for (size_t i = 0; i < nret; ++i)
    forEachTensor(results[i], [&](const at::Tensor& r) {
      if (r.defined()) {
        checkStridedResult(traits, r.layout());
        checkUnquantizedResult(traits, r.scalar_type());
      }
    });
  auto place = [&](const at::Tensor& cpu_result) -> at::Tensor {
    if (!cpu_result.defined()) return cpu_result;
    // The CPU kernel's layout is the layout CUDA's kernel gives (the same
    // BatchLinearAlgebra code: LAPACK results are column-major) and the one
    // the compiler's fake tensors expect.
    at::Tensor out =
        cpu_result.is_non_overlapping_and_dense()
            ? emptyStrided(cpu_result.sizes(), cpu_result.strides(),
                           cpu_result.scalar_type(), device)
            : emptyContiguous(cpu_result.sizes(), cpu_result.scalar_type(),
                              device);
    copies->add(out);
    copies->keep(cpu_result);
    ++num_copies;
    return out;
  };
  std::vector<IValue> outs;
  for (size_t i = 0; i < nret; ++i) {
    const IValue& r = results[i];
    int a = traits.alias_arg[i];
    if (a >= 0 && r.isTensor()) {
      at::Tensor dst = args[a].toTensor();
      if (copy_out_args && traits.arg_is_out[a]) {
        at::Tensor cpu = r.toTensor();
        resizeLikeCpuResult(dst, cpu);
        copies->add(dst);
        copies->keep(cpu);
        ++num_copies;
      }
      outs.push_back(dst);
    } else {
      outs.push_back(mapTensors(r, place));
    }
  }
  if (num_copies > 0)
    queueHostCopies(device, "copy_results", copies, num_copies);
  return outs;
}

void queueHostCopies(c10::DeviceIndex device, const char* label,
                     std::shared_ptr<AliasPlan> copies, size_t pairs) {
  launch(device, label, [copies = std::move(copies), pairs] {
    c10::InferenceMode guard;
    useOneThread();
    AliasPlan::Built t = copies->build();
    for (size_t i = 0; i < pairs; ++i) t[2 * i].copy_(t[2 * i + 1]);
  });
}

void runSynchronously(const c10::OperatorHandle& op, OpTraits& traits,
                      torch::jit::Stack* stack, std::vector<IValue> args,
                      c10::DeviceIndex device) {
  const auto& schema = op.schema();
  auto call = std::make_shared<CpuCall>(op);
  buildCpuArgs(*call, args, schema, /*fresh_out_args=*/true, traits);
  // The host waits anyway: an error of the kernel is raised here, as the
  // exception the kernel threw (IndexError, ValueError, ...), not as a device
  // error at a later sync — and the stream is not poisoned by it. Its
  // warnings are raised here too.
  auto result = std::make_shared<ValidationResult>();
  auto returned = std::make_shared<torch::jit::Stack>();
  if (profiler::recordingItems())
    profiler::noteEagerItem(traits.name.c_str(), call->plan);
  launch(device, traits.name.c_str(), [call, result, returned] {
    runOnDeviceInto(result, [&] {
      size_t next = 0;
      *returned = call->run(call->plan.build(), next);
    });
  });
  synchronizeStream(currentStream(device));
  raiseAtCall(*result);
  // In-place results were written into device memory by the kernel itself.
  std::vector<IValue> outs = placeCpuResults(schema, traits, args, *returned,
                                             device, /*copy_out_args=*/true);
  torch::jit::drop(*stack, args.size());
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
