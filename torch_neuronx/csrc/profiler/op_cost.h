// What an eager op's device item costs, told to the profiler: its arithmetic
// (flops), memory traffic (bytes) and estimated Trainium time with its parts
// (neuron_rt::estimateItem), from the tensors it reads and writes. Only while
// a profile records device items; otherwise one relaxed load.
#pragma once

#include <c10/util/ArrayRef.h>
#include <neuron_runtime/trace.h>
#include <neuron_runtime/trainium_estimate.h>

#include <cstdint>

#include "core/device.h"

namespace torch_neuronx {
class AliasPlan;

namespace profiler {

inline bool recordingItems() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

// One tensor of an eager op as the estimate sees it.
//
// An op's tensors come in AliasPlan order, which is the order the eager path
// records them in (eager/cpu_call.cpp, structured_kernel.h):
//   1. its arguments, in schema order, each tensor where it appears: a
//      Tensor argument is one entry; a TensorList (or Tensor?[]) argument is
//      one entry per element, in list order; an optional Tensor that is None
//      is one entry with itemsize 0; scalars, ints, lists of ints and other
//      non-tensor arguments have no entry; an out= argument is an argument
//      (it is not repeated among the results);
//   2. then its results that are new tensors (not out= arguments), in
//      schema order, lists flattened the same way.
// itemsize is the dtype's size in bytes; 0 marks an entry that is not a
// device tensor: an undefined tensor, or a CPU scalar tensor handed to the
// kernel as its value. An entry with itemsize 0 counts for nothing (no
// bytes, no elements, and its sizes are ignored, the eager path records
// none for it), but keeps its position (a matmul's operands are found by
// position).
struct OpTensor {
  c10::IntArrayRef sizes;
  int64_t itemsize = 0;
};

// A copy item ("aten::copy_" on one device, "copy_host_to_device",
// "copy_device_to_host", "copy_device_to_device": tensors [dst, src], a host
// one included with its itemsize; "aten::_local_scalar_dense": [self]) is
// copyWork of their bytes, what noteCopyItem records for it.
//
// The work of eager op `name` ("aten::mm", an overload "aten::mm.out" is the
// same op) over its tensors. Matrix products, convolutions and scaled dot
// product attention run on the tensor engine, 2 flops per multiply-add,
// their matmuls' shapes kept for tile quantisation; other ops one flop per
// element of their largest tensor on the vector engines. bytes: every
// tensor read or written once; each tensor is one DMA transfer.
// element_bytes: the first device tensor's itemsize (4 when none).
neuron_rt::ItemWork eagerOpWork(const char* name,
                                c10::ArrayRef<OpTensor> tensors);

// The same over `plan`'s tensors: what noteEagerItem estimates.
neuron_rt::ItemWork eagerOpWork(const char* name, const AliasPlan& plan);

// Describes the next item this thread queues: op `name` over the tensors of
// `plan` (its arguments, then its results): eagerOpWork, estimated with the
// device's model (deviceModel()). A host fallback (eager/host_fallback_ops.h)
// is estimated as a Trainium runs it instead: hostFallbackParts, plus the
// item's own run time here as the host's compute (added when it completes),
// with detail "fallback=host".
void noteEagerItem(const char* name, const AliasPlan& plan);

// A host fallback's round trip on `m`: its tensors' bytes copied out and
// back (one transfer, a DMA start each way) and one launch for the device to
// go on after the host; the host's compute is not in it.
neuron_rt::EstimateParts hostFallbackParts(c10::ArrayRef<OpTensor> tensors,
                                           const neuron_rt::TrainiumModel& m);

// Describes the next item as a copy of `bytes` (read plus written): one
// transfer (copyWork), estimated with the device's model.
void noteCopyItem(int64_t bytes);
neuron_rt::ItemWork copyWork(int64_t bytes);

}  // namespace profiler
}  // namespace torch_neuronx
