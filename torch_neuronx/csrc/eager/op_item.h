// An eager work item that says what it computes: besides the code that runs
// it, its op, the tensors it works on (where they live, their geometry and
// dtype, which it writes) and its other arguments. This is what a pass over
// queued work reads — adaptive eager's fusion (adaptive/fusion_plan.h) and,
// on hardware, a runtime that builds programs from eager work — and what lets
// such a pass run the op's kernel over other tensors than its own (tiles of
// them) with the op's own CPU kernel, so that results stay bitwise equal.
//
// The structured fast path (structured_kernel.h), the generic path
// (device_op.cpp) and the LayerNorm forward (ops/layer_norm.cpp) queue their
// ops as OpItems.
#pragma once

#include <ATen/core/ivalue.h>
#include <neuron_runtime/work_item.h>

#include <vector>

#include "eager/alias_plan.h"

namespace torch_neuronx {

class OpItem : public neuron_rt::Task {
 public:
  explicit OpItem(const char* op) : op_(op) {}

  // The op's schema name ("aten::add.Tensor"); lives for the process.
  const char* op() const { return op_; }
  // The tensors it works on, in the order the eager path records them
  // (profiler/op_cost.h, OpTensor): its arguments, then its new results.
  virtual const AliasPlan& operands() const = 0;
  // Whether it writes operand `i` (an output, the self of an in-place op).
  virtual bool writes(int i) const = 0;
  // Its arguments in schema order (the outputs of a functional op follow),
  // each tensor as a meta tensor with its operand's geometry and dtype (a
  // CPU scalar as its value); built on demand, for a pass or a test.
  virtual std::vector<c10::IValue> arguments() const = 0;
  // Whether the host waits for this item (a first call's validation): it
  // must run as it is.
  virtual bool validating() const { return false; }
  // Nonzero for an op whose kernel computes each row of this many elements
  // of its first operand on its own (LayerNorm): it runs over any whole rows
  // of its tensors.
  virtual int64_t rowLength() const { return 0; }
  // On the worker, inside the item's InferenceMode: runs the op's kernel
  // over `tensors`, which stand for operands() in order (its own aliases, or
  // views of them: a fused pass's tiles).
  virtual void runOn(AliasPlan::Built& tensors) = 0;

  void released() override { operandsForUpdate().noteHeldStorages(); }

 protected:
  virtual AliasPlan& operandsForUpdate() = 0;

 private:
  const char* op_;
};

// A meta tensor with operand `i`'s geometry and dtype (its value for a kept
// host tensor; an undefined tensor for an undefined one).
at::Tensor describeOperand(const AliasPlan& plan, int i);

}  // namespace torch_neuronx
