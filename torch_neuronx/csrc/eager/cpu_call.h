// One CPU kernel call over device memory, as the work item of an eager op
// runs it. The host records the arguments at launch: `args` holds them with
// each tensor standing for what `plan` builds when the item runs (an alias of
// a device tensor, or a host tensor kept as is), recorded in mapTensors'
// order. The item builds the kernel's stack from them each time it runs (and
// again at each replay of a captured graph).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <vector>

#include "eager/alias_plan.h"
#include "eager/op_traits.h"

namespace torch_neuronx {

struct CpuCall {
  c10::OperatorHandle op;
  torch::jit::Stack args;
  AliasPlan plan;
  explicit CpuCall(const c10::OperatorHandle& o) : op(o) {}

  // Records `v` (its tensors) for the item: returns `v`, its tensors to be
  // replaced, in order, by substitute(). Defined tensors leave a placeholder:
  // `args` must not keep device memory alive (a tensor freed while its work
  // is queued returns its memory at once, as on CUDA; stream order makes the
  // reuse safe).
  c10::IValue record(const c10::IValue& v);

  // `v` with its tensors replaced by built[next], built[next + 1], ...
  static c10::IValue substitute(const c10::IValue& v,
                                const AliasPlan::Built& built, size_t& next);

  // On the device worker: the kernel's stack (the aliases built; `next` ends
  // at the first tensor recorded after the arguments), called; the results.
  torch::jit::Stack run(const AliasPlan::Built& built, size_t& next) const;
};

// Records the op's arguments into `call`: tensors as CPU aliases and (with
// `fresh_out_args`) out= arguments as fresh CPU tensors whose results the
// caller places afterwards. Not for random ops (random_op.h draws them on the
// host at the call).
void buildCpuArgs(CpuCall& call, const std::vector<c10::IValue>& args,
                  const c10::FunctionSchema& schema, bool fresh_out_args,
                  const OpTraits& traits);

}  // namespace torch_neuronx
