#include "ops/copy.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <neuron_runtime/event.h>

#include <memory>

#include "adaptive/item_signature.h"
#include "core/device.h"
#include "core/pinned_allocator.h"
#include "core/stream.h"
#include "eager/alias_plan.h"
#include "eager/device_check.h"
#include "eager/op_item.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {
namespace {

// The host operand of an asynchronous copy from or to pinned memory. The
// pinned allocator is told the block is used on `stream` (so it is not
// reused before the copy has run, as CUDA's CachingHostAllocator does) and
// the work item gets a non-owning view: the caller's tensor is freed when the
// caller drops it, not when the stream gets round to the copy. Pinned memory
// the allocator does not know keeps the tensor itself alive in the item.
at::Tensor pinnedOperand(const at::Tensor& host, const c10::Stream& stream) {
  if (!recordPinnedUse(host, stream)) return host;
  at::Tensor view = at::from_blob(host.data_ptr(), host.sizes(), host.strides(),
                                  host.options());
  view._set_conj(host.is_conj());
  view._set_neg(host.is_neg());
  return view;
}

// Records a copy operand: a device tensor as its alias, a host tensor as is.
void addOperand(AliasPlan& plan, const at::Tensor& t) {
  if (isNeuron(t))
    plan.add(t);
  else
    plan.keep(t);
}

// Runs dst.copy_(src) inside a work item, over CPU aliases of device memory.
// Made right before it is queued (it describes the next item to the
// profiler).
std::function<void()> copyItem(const at::Tensor& dst, const at::Tensor& src) {
  if (profiler::recordingItems())
    profiler::noteCopyItem(static_cast<int64_t>(dst.nbytes() + src.nbytes()));
  auto plan = std::make_shared<AliasPlan>();
  addOperand(*plan, dst);
  addOperand(*plan, src);
  if (adaptive::enabled()) adaptive::signFromPlan("copy", *plan);
  return [plan] {
    runOnDevice([&] {
      AliasPlan::Built t = plan->build();
      t[0].copy_(t[1]);
    });
  };
}

// A copy between two tensors of one device says what it computes
// (eager/op_item.h): adaptive eager fuses it into a chain (a clone before an
// in-place op).
class DeviceCopyItem final : public OpItem {
 public:
  DeviceCopyItem() : OpItem("aten::copy_") {}
  AliasPlan plan;  // dst, src

  void run() override {
    runOnDevice([&] {
      AliasPlan::Built t = plan.build();
      runOn(t);
    });
  }
  void runOn(AliasPlan::Built& t) override { t[0].copy_(t[1]); }
  const AliasPlan& operands() const override { return plan; }
  bool writes(int i) const override { return i == 0; }
  std::vector<c10::IValue> arguments() const override {
    return {describeOperand(plan, 0), describeOperand(plan, 1),
            c10::IValue(false)};
  }

 protected:
  AliasPlan& operandsForUpdate() override { return plan; }
};

neuron_rt::TaskPtr deviceCopyItem(const at::Tensor& dst,
                                  const at::Tensor& src) {
  if (profiler::recordingItems())
    profiler::noteCopyItem(static_cast<int64_t>(dst.nbytes() + src.nbytes()));
  auto item = std::make_unique<DeviceCopyItem>();
  item->plan.add(dst);
  item->plan.add(src);
  if (adaptive::enabled()) adaptive::signFromPlan("copy", item->plan);
  return item;
}

}  // namespace

at::Tensor& copyInto(at::Tensor& self, const at::Tensor& src,
                     bool non_blocking) {
  if (self.numel() == 0) return self;
  TORCH_CHECK(self.device().is_cpu() || isNeuron(self),
              "copy_: unsupported destination device ", self.device());
  // As CPU and CUDA do, at the call: an expanded destination would be
  // written through several elements at once.
  if (!self.is_same(src)) at::assert_no_internal_overlap(self);
  TORCH_CHECK(src.device().is_cpu() || isNeuron(src),
              "copy_: unsupported source device ", src.device());
  if (isNeuron(self) && isNeuron(src) &&
      self.device().index() == src.device().index()) {
    c10::DeviceIndex d = self.device().index();
    launchTask(d, "aten::copy_", deviceCopyItem(self, src),
               neuron_rt::ItemKind::kCopy);
    return self;
  }

  if (isNeuron(self) && src.device().is_cpu()) {
    // Host to device. The host bytes are staged now, so the caller may
    // reuse its tensor as soon as copy_ returns (CUDA's pageable-memory
    // behaviour) -- except non_blocking from pinned memory, which the item
    // reads when it runs (as on CUDA, writing to the source before then is
    // a race). dtype conversion and broadcasting happen on the device.
    c10::DeviceIndex d = self.device().index();
    at::Tensor staged = src.is_pinned() && non_blocking
                            ? pinnedOperand(src, currentStream(d))
                            : src.clone(at::MemoryFormat::Preserve);
    launch(d, "copy_host_to_device", copyItem(self, staged),
           neuron_rt::ItemKind::kCopy);
    return self;
  }

  if (self.device().is_cpu() && isNeuron(src)) {
    // Device to host: the item writes straight into the host tensor; unless
    // non_blocking into pinned memory, the caller waits for it (a sync
    // point, like .cpu() on CUDA).
    c10::DeviceIndex d = src.device().index();
    bool async = non_blocking && self.is_pinned();
    at::Tensor dst = async ? pinnedOperand(self, currentStream(d)) : self;
    launch(d, "copy_device_to_host", copyItem(dst, src),
           neuron_rt::ItemKind::kCopy);
    if (!async) synchronizeStream(currentStream(d));
    return self;
  }

  // neuron:i -> neuron:j. The copy runs on the destination's current stream
  // after the source's stream has reached this point; the source's stream
  // then waits for the copy, so later writes to the source cannot race it.
  c10::DeviceIndex sd = src.device().index(), dd = self.device().index();
  c10::Stream src_stream = currentStream(sd), dst_stream = currentStream(dd);
  neuron_rt::Event ready;
  ready.record(runtimeStream(src_stream));
  ready.block(runtimeStream(dst_stream));
  launchOn(dst_stream, "copy_device_to_device", copyItem(self, src),
           neuron_rt::ItemKind::kCopy);
  neuron_rt::Event done;
  done.record(runtimeStream(dst_stream));
  done.block(runtimeStream(src_stream));
  return self;
}

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst,
                    bool non_blocking) {
  at::Tensor d = dst;
  copyInto(d, self, non_blocking);
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  at::Tensor d = dst;
  copyInto(d, self, false);
  return dst;
}

c10::Scalar localScalarDense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  c10::DeviceIndex d = self.device().index();
  auto plan = std::make_shared<AliasPlan>();
  plan->add(self);
  auto result = std::make_shared<c10::Scalar>();
  if (profiler::recordingItems())
    profiler::noteCopyItem(static_cast<int64_t>(self.element_size()));
  launch(d, "aten::_local_scalar_dense", [plan, result] {
    runOnDevice([&] { *result = at::_local_scalar_dense(plan->build()[0]); });
  });
  synchronizeStream(currentStream(d));
  return *result;
}

}  // namespace torch_neuronx
