#include "eager/device_op.h"

#include <ATen/ATen.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>

#include "adaptive/item_signature.h"
#include "core/device.h"
#include "core/memory_history.h"
#include "core/storage.h"
#include "core/stream.h"
#include "eager/cpu_call.h"
#include "eager/device_check.h"
#include "eager/dtype_widening.h"
#include "eager/first_call_validation.h"
#include "eager/ivalue_tensors.h"
#include "eager/meta_cache.h"
#include "eager/meta_mirror.h"
#include "eager/op_item.h"
#include "eager/op_stats.h"
#include "eager/op_traits.h"
#include "eager/random_op.h"
#include "eager/run_on_device.h"
#include "eager/synchronous_op.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {
namespace {

using c10::IValue;

// A view of the device tensor `base` with the geometry the Meta kernel gave.
at::Tensor viewOf(const at::Tensor& base, const TensorMeta& m) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(),
      c10::scalarTypeToTypeMeta(m.dtype));
  impl->set_sizes_and_strides(m.sizes, m.strides, m.storage_offset);
  return at::Tensor(std::move(impl));
}

TensorMeta describe(const at::Tensor& m,
                    const std::vector<at::Tensor>& meta_inputs) {
  TensorMeta d;
  if (!m.defined()) {
    d.defined = false;
    return d;
  }
  d.sizes = m.sizes().vec();
  d.strides = m.strides().vec();
  d.storage_offset = m.storage_offset();
  d.dtype = m.scalar_type();
  for (size_t k = 0; k < meta_inputs.size(); ++k)
    if (meta_inputs[k].defined() &&
        meta_inputs[k].storage().unsafeGetStorageImpl() ==
            m.storage().unsafeGetStorageImpl()) {
      d.base = static_cast<int>(k);
      break;
    }
  return d;
}

// Step 0: the device the op runs on, with its arguments checked. Index
// lists may hold CPU tensors (as on CUDA): they are moved over. A tensor the
// op writes must already be on that device. Sets `widen` when an argument
// has a dtype the CPU kernel lacks.
c10::DeviceIndex prepareArguments(const c10::FunctionSchema& schema,
                                  const OpTraits& traits,
                                  std::vector<IValue>& args, bool& widen) {
  const size_t nargs = args.size();
  DeviceCheck check;
  widen = false;
  for (size_t i = 0; i < nargs; ++i) {
    const IValue& v = args[i];
    if (v.isDevice()) check.device(v.toDevice());
    if (v.isOptionalTensorList()) continue;  // index lists: below
    const char* name = schema.arguments()[i].name().c_str();
    forEachTensor(v, [&](const at::Tensor& t) {
      check.tensor(t, name);
      widen |= needsWidening(traits.widen_mask, t);
    });
  }
  c10::DeviceIndex device = check.finish();
  for (size_t i = 0; i < nargs; ++i) {
    if (!args[i].isOptionalTensorList()) continue;
    args[i] = mapTensors(args[i], [&](const at::Tensor& t) -> at::Tensor {
      if (isNeuron(t)) {
        check.tensor(t);
        return t;
      }
      return t.to(neuronDevice(device));
    });
  }
  for (size_t i = 0; i < nargs; ++i) {
    const auto& arg = schema.arguments()[i];
    if (!traits.arg_is_out[i] &&
        !(arg.alias_info() && arg.alias_info()->isWrite()))
      continue;
    forEachTensor(args[i], [&](const at::Tensor& t) {
      TORCH_CHECK(!t.defined() || isNeuron(t), traits.name,
                  ": the tensor written to (argument '", arg.name(),
                  "') is on ", t.device(),
                  " but the op runs on neuron:", static_cast<int>(device));
    });
  }
  return device;
}

// Step 1 on a cache miss: the output metadata from the Meta kernel, run on
// meta tensors that mirror the arguments. False when the Meta kernel cannot
// tell (missing, rejecting the inputs, or needing the data): the op then
// takes the synchronous path, where the CPU kernel decides.
bool metaFromMetaKernel(const c10::OperatorHandle& op, OpTraits& traits,
                        const std::vector<IValue>& args, CachedMeta& out) {
  MetaMirror mirror;
  torch::jit::Stack meta_stack;
  meta_stack.reserve(args.size());
  for (const IValue& v : args)
    meta_stack.push_back(
        mapDevice(mapTensors(v, mirror), c10::Device(c10::kMeta)));
  std::vector<at::Tensor> meta_inputs = flatTensors(meta_stack);
  try {
    op.callBoxed(meta_stack);
  } catch (const c10::NotImplementedError& e) {
    traits.meta_missing = true;
    explainSynchronous(traits, e.what_without_backtrace());
    return false;
  } catch (const std::exception& e) {
    explainSynchronous(traits, e.what());
    return false;
  } catch (...) {
    // Python meta kernels raise Python errors.
    return false;
  }
  const size_t nret = op.schema().returns().size();
  for (size_t i = 0; i < nret; ++i) {
    std::vector<TensorMeta> r;
    forEachTensor(meta_stack[i], [&](const at::Tensor& t) {
      if (t.defined()) {
        checkStridedResult(traits, t.layout());
        checkUnquantizedResult(traits, t.scalar_type());
      }
      r.push_back(describe(t, meta_inputs));
    });
    out.returns.push_back(std::move(r));
  }
  if (traits.adjust_meta) traits.adjust_meta(out, args);
  return true;
}

// The op's results before it runs, from the output metadata.
struct PlannedResults {
  std::vector<IValue> outs;
  std::vector<int> fresh;  // returns that need a copy from the CPU result
  bool needs_work = false;
};

// Step 2: in-place/out= results are the arguments (resized if the Meta
// kernel resized them); views take the Meta view's geometry; the rest are new
// device tensors.
PlannedResults planResults(const c10::FunctionSchema& schema,
                           const OpTraits& traits,
                           const std::vector<IValue>& args,
                           const CachedMeta& meta, c10::DeviceIndex device) {
  const size_t nret = schema.returns().size();
  std::vector<at::Tensor> inputs = flatTensors(args);
  PlannedResults p;
  p.outs.resize(nret);
  for (size_t i = 0; i < nret; ++i) {
    const std::vector<TensorMeta>& metas = meta.returns[i];
    const bool is_list =
        schema.returns()[i].type()->kind() == c10::TypeKind::ListType;
    const int a = traits.alias_arg[i];
    const bool writes = a >= 0 && traits.alias_write[i];
    auto make = [&](const TensorMeta& m) -> at::Tensor {
      if (!m.defined) return at::Tensor();
      if (a >= 0 && !traits.alias_write[i]) {
        TORCH_INTERNAL_ASSERT(m.base >= 0, traits.name,
                              ": view result does not alias an input");
        return viewOf(inputs[m.base], m);
      }
      return emptyStrided(m.sizes, m.strides, m.dtype, device);
    };
    if (writes) {
      p.needs_work = true;
      if (!is_list) {
        const at::Tensor& real = args[a].toTensor();
        const TensorMeta& m = metas.at(0);
        if (real.sizes() != c10::IntArrayRef(m.sizes)) {
          real.resize_(m.sizes);
          if (real.strides() != c10::IntArrayRef(m.strides))
            real.unsafeGetTensorImpl()->set_sizes_and_strides(
                m.sizes, m.strides, real.storage_offset());
        }
      }
      p.outs[i] = args[a];
      continue;
    }
    if (a < 0) {
      p.needs_work = true;
      p.fresh.push_back(static_cast<int>(i));
    }
    if (is_list) {
      c10::List<at::Tensor> l;
      for (const TensorMeta& m : metas) l.push_back(make(m));
      p.outs[i] = l;
    } else {
      p.outs[i] = make(metas.at(0));
    }
  }
  // Ops with no tensor results but side effects (e.g. _foreach_*_ returning
  // nothing) still have work to do.
  if (nret == 0) p.needs_work = true;
  return p;
}

// Step 3's item: the CPU kernel over aliases of the device memory, copying
// fresh results into their device tensors. It says what it computes
// (op_item.h).
class CpuKernelItem final : public OpItem {
 public:
  CpuKernelItem(const c10::OperatorHandle& op, const char* name,
                FailureSlot failure)
      : OpItem(name), call_(op), failure_(std::move(failure)) {}

  // Records the arguments (the operands of the written ones marked), then
  // the fresh results' device tensors.
  void record(const OpTraits& traits, const std::vector<IValue>& args,
              const PlannedResults& planned) {
    const auto& schema = call_.op.schema();
    buildCpuArgs(call_, args, schema, /*fresh_out_args=*/false, traits);
    // buildCpuArgs records each argument's tensors in order: find which
    // operands belong to written arguments by counting them again.
    int at = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const auto& arg = schema.arguments()[i];
      const bool written = traits.arg_is_out[i] ||
                           (arg.alias_info() && arg.alias_info()->isWrite());
      // Counted as record() counts them (mapTensors).
      (void)mapTensors(args[i], [&](const at::Tensor& t) -> at::Tensor {
        if (written) written_.push_back(at);
        ++at;
        return t;
      });
    }
    for (int i : planned.fresh) {
      const int first = call_.plan.count();
      targets_.emplace_back(i, call_.record(planned.outs[i]));
      for (int k = first; k < call_.plan.count(); ++k) written_.push_back(k);
    }
  }

  void run() override {
    runOnDeviceInto(failure_, [&] {
      AliasPlan::Built built = call_.plan.build();
      runOn(built);
    });
  }
  void runOn(AliasPlan::Built& built) override {
    size_t next = 0;
    const torch::jit::Stack stack = call_.run(built, next);
    for (auto& [i, recorded] : targets_) {
      const IValue target = CpuCall::substitute(recorded, built, next);
      const IValue& result = stack[i];
      if (target.isTensor()) {
        if (target.toTensor().defined())
          target.toTensor().copy_(result.toTensor());
      } else {
        auto dst = target.toTensorList();
        auto src = result.toTensorList();
        for (size_t k = 0; k < dst.size(); ++k)
          if (dst.get(k).defined()) dst.get(k).copy_(src.get(k));
      }
    }
  }
  const AliasPlan& operands() const override { return call_.plan; }
  bool writes(int i) const override {
    return std::find(written_.begin(), written_.end(), i) != written_.end();
  }
  bool validating() const override { return failure_ != nullptr; }
  std::vector<IValue> arguments() const override {
    std::vector<IValue> out;
    int at = 0;
    auto describe = [&](const IValue& v) {
      return mapTensors(v, [&](const at::Tensor&) -> at::Tensor {
        return describeOperand(call_.plan, at++);
      });
    };
    for (const IValue& v : call_.args) out.push_back(describe(v));
    for (const auto& [i, recorded] : targets_)
      out.push_back(describe(recorded));
    return out;
  }

 protected:
  AliasPlan& operandsForUpdate() override { return call_.plan; }

 private:
  CpuCall call_;
  std::vector<std::pair<int, IValue>> targets_;
  c10::SmallVector<int, 2> written_;
  FailureSlot failure_;
};

// Step 3: one work item, the CPU kernel over aliases of the device memory.
// A failure of the item is reported into `failure` when the call validates
// a new signature.
void enqueueCpuKernel(const c10::OperatorHandle& op, const OpTraits& traits,
                      const std::vector<IValue>& args,
                      const PlannedResults& planned, c10::DeviceIndex device,
                      const FailureSlot& failure) {
  auto item = std::make_unique<CpuKernelItem>(op, traits.name.c_str(), failure);
  item->record(traits, args, planned);
  if (profiler::recordingItems())
    profiler::noteEagerItem(traits.name.c_str(), item->operands());
  if (adaptive::enabled())
    adaptive::signFromPlan(traits.name.c_str(), item->operands());
  launchTask(device, traits.name.c_str(), std::move(item));
}

}  // namespace

void deviceOpFallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                      torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  OpTraits& traits = traitsFor(op);
  AllocLabel label(traits.name.c_str());  // tags the blocks for snapshots
  const size_t nargs = schema.arguments().size();
  std::vector<IValue> args(stack->end() - nargs, stack->end());

  bool widen = false;
  const c10::DeviceIndex device = prepareArguments(schema, traits, args, widen);
  if (traits.cpu_kernel_missing) refuseUnsupportedOp(traits);
  noteExecutedOnce(traits.name.c_str(), traits.noted);
  if (traits.call_check) traits.call_check(args);

  if (widen) {
    std::copy(args.begin(), args.end(), stack->end() - nargs);
    runWidened(op, traits.widen_mask, stack);
    return;
  }
  if (traits.draws_random) {
    runRandomOp(op, traits, stack, std::move(args), device);
    return;
  }
  if (traits.meta_missing || traits.meta_differs ||
      !traits.tensor_returns_only) {
    runSynchronously(op, traits, stack, std::move(args), device);
    return;
  }

  // 1. Output metadata: from the cache, or from the Meta kernel.
  MetaCacheKey key;
  const bool cacheable = key.build(&schema, args);
  const CachedMeta* cached = cacheable ? findCachedMeta(key) : nullptr;
  CachedMeta computed;
  // A new argument signature runs as a validating item (see
  // first_call_validation.h); only new metadata can mean a new signature.
  MetaCacheKey signature;
  bool validate = false;
  if (!cached) {
    if (cacheable) {
      signature.build(&schema, args, KeyKind::kSignature);
      validate = shouldValidate(signature);
    }
    if (!metaFromMetaKernel(op, traits, args, computed)) {
      runSynchronously(op, traits, stack, std::move(args), device);
      return;
    }
    if (cacheable) storeCachedMeta(key, computed);
    cached = &computed;
  }

  // 2. Results, allocated where the op will write them.
  PlannedResults planned = planResults(schema, traits, args, *cached, device);

  // 3. One work item on the current stream.
  if (planned.needs_work) {
    FailureSlot failure;
    if (validate) failure = std::make_shared<ValidationResult>();
    enqueueCpuKernel(op, traits, args, planned, device, failure);
    if (failure) finishValidation(device, failure, signature, key);
  }

  torch::jit::drop(*stack, nargs);
  for (auto& o : planned.outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
