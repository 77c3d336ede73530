#include "aten/device_op.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "aten/call_checks.h"
#include "aten/cpu_alias.h"
#include "aten/dtype_widening.h"
#include "aten/first_call_validation.h"
#include "aten/ivalue_tensors.h"
#include "aten/meta_cache.h"
#include "aten/op_args.h"
#include "aten/op_stats.h"
#include "aten/run_on_device.h"
#include "aten/schema_aliases.h"
#include "core/device.h"
#include "core/generator.h"
#include "core/memory_history.h"
#include "core/storage.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

using c10::IValue;
constexpr auto PrivateUse1 = c10::DeviceType::PrivateUse1;

// What the dispatcher tells us once per operator.
struct OpTraits {
  std::string name;
  bool meta_missing = false;  // Meta kernel absent: always run synchronously
  bool meta_differs = false;  // Meta kernel describes other outputs than CPU's
  bool sync_explained = false;
  // Corrects a Meta kernel's dtypes where they follow CUDA, not CPU.
  void (*adjust_meta)(CachedMeta&, const std::vector<IValue>&) = nullptr;
  // Dtypes computed in a wider dtype (dtype_widening.h).
  uint64_t widen_mask = 0;
  // Host checks of argument values (call_checks.h).
  CallCheck call_check = nullptr;
  std::atomic<uint32_t> noted{
      0};  // op-stats generation this op was last recorded in
  bool tensor_returns_only = true;
  // Per return: index of the argument it aliases (-1 fresh), and whether the
  // alias is a write (in-place / out=) or a view.
  std::vector<int> alias_arg;
  std::vector<bool> alias_write;
  std::vector<bool> arg_is_out;
};

// Ops whose Meta kernel describes the CUDA kernel's outputs rather than the
// CPU kernel's: batch norm's saved statistics (on CPU empty when not
// training, and in the input's dtype), embedding_bag's offset2bag and
// bag_size. The CPU kernel decides their outputs, so they run synchronously.
bool metaDiffersFromCpu(const std::string& name) {
  static const std::unordered_set<std::string> ops = {
      "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_batch_norm_with_update", "aten::_embedding_bag",
      "aten::_embedding_bag_forward_only"};
  return ops.count(name) > 0;
}

// layer_norm on CPU keeps mean and rstd in the input's dtype; the Meta
// kernel (CUDA's convention) makes them float32 for half inputs.
void layerNormStatsInInputDtype(CachedMeta& m,
                                const std::vector<IValue>& args) {
  c10::ScalarType dtype = args[0].toTensor().scalar_type();
  for (size_t i = 1; i < m.returns.size(); ++i)
    for (TensorMeta& t : m.returns[i]) t.dtype = dtype;
}

// The margin losses without reduction return a 0-dim loss for a 0-dim or
// 1-dim input on CPU (and CUDA); their Meta kernel says [1].
void marginLossUnreducedShape(CachedMeta& m, const std::vector<IValue>& args) {
  const int64_t reduction = args.back().toInt();
  if (reduction != 0 || args[0].toTensor().dim() > 1) return;
  TensorMeta& loss = m.returns.at(0).at(0);
  loss.sizes.clear();
  loss.strides.clear();
}

// linalg_eig's C++ Meta kernel makes the eigenvectors row-major; the CPU and
// CUDA kernels (LAPACK / MAGMA) return them column-major, and so do the
// compiler's fake tensors (torch/_meta_registrations.py).
void eigenvectorsColumnMajor(CachedMeta& m, const std::vector<IValue>&) {
  TensorMeta& v = m.returns.at(1).at(0);
  const size_t d = v.sizes.size();
  if (d < 2) return;
  std::vector<int64_t> strides(d);
  strides[d - 2] = 1;
  strides[d - 1] = std::max<int64_t>(v.sizes[d - 2], 1);
  int64_t step = strides[d - 1] * std::max<int64_t>(v.sizes[d - 1], 1);
  for (size_t i = d - 2; i-- > 0;) {
    strides[i] = step;
    step *= std::max<int64_t>(v.sizes[i], 1);
  }
  v.strides = std::move(strides);
}

std::mutex g_traits_mu;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpTraits>>
    g_traits;

OpTraits& traitsFor(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::lock_guard<std::mutex> g(g_traits_mu);
  auto& slot = g_traits[&schema];
  if (slot) return *slot;
  slot = std::make_unique<OpTraits>();
  OpTraits& t = *slot;
  t.name = schema.operator_name().name;
  t.meta_differs = metaDiffersFromCpu(t.name);
  t.widen_mask = widenedDtypes(op);
  t.call_check = callCheckFor(schema);
  if (t.name == "aten::native_layer_norm")
    t.adjust_meta = &layerNormStatsInInputDtype;
  if (t.name == "aten::multi_margin_loss" ||
      t.name == "aten::multilabel_margin_loss_forward")
    t.adjust_meta = &marginLossUnreducedShape;
  if (t.name == "aten::linalg_eig") t.adjust_meta = &eigenvectorsColumnMajor;
  if (!schema.overload_name().empty()) t.name += "." + schema.overload_name();
  const auto& args = schema.arguments();
  for (const auto& a : args) t.arg_is_out.push_back(a.is_out());
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto& r = schema.returns()[i];
    const auto& type = r.type();
    bool tensorish =
        type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::ListType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (!tensorish) t.tensor_returns_only = false;
    const int alias = aliasedArgument(schema, i);
    const bool write = alias >= 0 && r.alias_info()->isWrite();
    t.alias_arg.push_back(alias);
    t.alias_write.push_back(write);
  }
  return t;
}

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

// A CPU generator for this launch, drawn from the neuron generator (or the
// device's default one), so random ops are reproducible per seed.
IValue cpuGenerator(const IValue& v, c10::DeviceIndex device) {
  std::optional<at::Generator> gen;
  if (v.isGenerator()) gen = v.toGenerator();
  return IValue(launchGenerator(gen, device));
}

// A CPU kernel call over device memory. The host records the arguments at
// launch: `args` holds them with each tensor standing for what `plan` builds
// (an alias of a device tensor, or a host tensor kept as is), recorded in
// mapTensors' order; the item builds the kernel's stack from them when it
// runs (and again at each replay of a captured graph).
struct CpuCall {
  c10::OperatorHandle op;
  torch::jit::Stack args;
  AliasPlan plan;
  explicit CpuCall(const c10::OperatorHandle& o) : op(o) {}

  // Records `v` (its tensors) for the item: returns `v`, its tensors to be
  // replaced, in order, by substitute().
  // Defined tensors leave a placeholder: `args` must not keep device memory
  // alive (a tensor freed while its work is queued returns its memory at
  // once, as on CUDA; stream order makes the reuse safe).
  IValue record(const IValue& v) {
    return mapTensors(v, [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || isNeuron(t))
        plan.add(t);
      else
        plan.keep(t.clone());  // a CPU scalar: its value now
      return t.defined() ? placeholder() : t;
    });
  }
  static const at::Tensor& placeholder() {
    static const at::Tensor p = at::empty({0});
    return p;
  }
  // `v` with its tensors replaced by built[next], built[next + 1], ...
  static IValue substitute(const IValue& v, const AliasPlan::Built& built,
                           size_t& next) {
    return mapTensors(
        v, [&](const at::Tensor&) -> at::Tensor { return built[next++]; });
  }
  // On the device worker: the kernel's stack (the aliases built, `next` then
  // at the first tensor recorded after the arguments), called; the results.
  torch::jit::Stack run(const AliasPlan::Built& built, size_t& next) const {
    torch::jit::Stack stack;
    stack.reserve(args.size());
    for (const IValue& v : args) stack.push_back(substitute(v, built, next));
    op.callBoxed(stack);
    return stack;
  }
};

void buildCpuArgs(CpuCall& call, const std::vector<IValue>& args,
                  const c10::FunctionSchema& schema, c10::DeviceIndex device,
                  bool fresh_out_args, const OpTraits& traits) {
  call.args.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    const auto& arg = schema.arguments()[i];
    const c10::TypePtr& type = arg.type();
    const c10::TypePtr& inner = type->kind() == c10::TypeKind::OptionalType
                                    ? type->containedType(0)
                                    : type;
    if (inner->kind() == c10::TypeKind::GeneratorType) {
      call.args.push_back(cpuGenerator(v, device));
      continue;
    }
    if (fresh_out_args && traits.arg_is_out[i] && v.isTensor()) {
      call.args.push_back(call.record(
          at::empty({0}, v.toTensor().options().device(c10::kCPU))));
      continue;
    }
    call.args.push_back(mapDevice(call.record(v), c10::Device(c10::kCPU)));
  }
}

// TORCH_NEURONX_LOG_SYNC_OPS=1 prints why an op took the synchronous path
// (once per op): a debugging aid for ops that stall the pipeline.
void explainSynchronous(OpTraits& traits, const char* why) {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_NEURONX_LOG_SYNC_OPS");
    return v && std::string(v) == "1";
  }();
  if (!on || traits.sync_explained) return;
  traits.sync_explained = true;
  std::fprintf(stderr, "[torch_neuronx] %s runs synchronously: %.300s\n",
               traits.name.c_str(), why);
}

// Neuron tensors are dense and strided. An op whose result would have
// another layout (to_sparse, to_mkldnn, ...) is refused at the call, before
// anything is written, rather than handing back a dense tensor.
const char* pythonLayoutName(c10::Layout layout) {
  switch (layout) {
    case c10::kSparse:
      return "torch.sparse_coo";
    case c10::kSparseCsr:
      return "torch.sparse_csr";
    case c10::kSparseCsc:
      return "torch.sparse_csc";
    case c10::kSparseBsr:
      return "torch.sparse_bsr";
    case c10::kSparseBsc:
      return "torch.sparse_bsc";
    case c10::kMkldnn:
      return "torch._mkldnn";
    case c10::kJagged:
      return "torch.jagged";
    default:
      return "a non-strided layout";
  }
}

void checkStridedResult(const OpTraits& traits, c10::Layout layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      layout == c10::kStrided, traits.name,
      " would return a tensor with layout ", pythonLayoutName(layout),
      " on neuron, but neuron tensors support only the strided (dense) "
      "layout. Sparse, mkldnn and other layouts are not supported on neuron; "
      "convert on the CPU instead (e.g. t.cpu().to_sparse()).");
}

// Synchronous path: runs the CPU kernel in a work item, waits, and places
// the results in device memory.
void runSynchronously(const c10::OperatorHandle& op, OpTraits& traits,
                      torch::jit::Stack* stack, std::vector<IValue> args,
                      c10::DeviceIndex device) {
  const auto& schema = op.schema();
  auto call = std::make_shared<CpuCall>(op);
  buildCpuArgs(*call, args, schema, device, /*fresh_out_args=*/true, traits);
  // The host waits anyway: an error of the kernel is raised here, as the
  // exception the kernel threw (IndexError, ValueError, ...), not as a device
  // error at a later sync — and the stream is not poisoned by it. Its
  // warnings are raised here too.
  auto result = std::make_shared<ValidationResult>();
  auto returned = std::make_shared<torch::jit::Stack>();
  launch(device, traits.name.c_str(), [call, result, returned] {
    runOnDeviceInto(result, [&] {
      size_t next = 0;
      *returned = call->run(call->plan.build(), next);
    });
  });
  synchronizeStream(currentStream(device));
  raiseAtCall(*result);
  torch::jit::Stack& results = *returned;
  const size_t nret = schema.returns().size();
  TORCH_INTERNAL_ASSERT(results.size() == nret);

  // Device outputs for fresh CPU results, filled by a copy item: the plan
  // holds (device output, CPU result) pairs.
  auto copies = std::make_shared<AliasPlan>();
  size_t num_copies = 0;
  for (size_t i = 0; i < nret; ++i)
    forEachTensor(results[i], [&](const at::Tensor& r) {
      if (r.defined()) checkStridedResult(traits, r.layout());
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
    IValue r = results[i];
    int a = traits.alias_arg[i];
    if (a >= 0 && r.isTensor()) {
      at::Tensor dst = args[a].toTensor();
      if (traits.arg_is_out[a]) {
        // out= argument: it got a fresh CPU tensor; size and fill the real one.
        at::Tensor cpu = r.toTensor();
        if (dst.sizes() != cpu.sizes()) {
          dst.resize_(cpu.sizes());
          if (cpu.is_non_overlapping_and_dense())  // as above: CPU's layout
            dst.unsafeGetTensorImpl()->set_sizes_and_strides(
                cpu.sizes(), cpu.strides(), dst.storage_offset());
        }
        copies->add(dst);
        copies->keep(cpu);
        ++num_copies;
      }
      outs.push_back(dst);
    } else {
      outs.push_back(mapTensors(r, place));
    }
  }
  if (num_copies > 0) {
    launch(device, "copy_results", [copies, num_copies] {
      c10::InferenceMode guard;
      AliasPlan::Built t = copies->build();
      for (size_t i = 0; i < num_copies; ++i) t[2 * i].copy_(t[2 * i + 1]);
    });
  }
  torch::jit::drop(*stack, args.size());
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace

void deviceOpFallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                      torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  OpTraits& traits = traitsFor(op);
  AllocLabel label(traits.name.c_str());  // tags the blocks for snapshots
  const size_t nargs = schema.arguments().size();
  std::vector<IValue> args(stack->end() - nargs, stack->end());

  DeviceCheck check;
  bool widen = false;  // a dtype the CPU kernel lacks (index lists never)
  for (size_t i = 0; i < nargs; ++i) {
    const IValue& v = args[i];
    if (v.isDevice()) check.device(v.toDevice());
    if (v.isOptionalTensorList()) {
      // Index tensors may live on the CPU (as on CUDA): move them over.
      continue;
    }
    forEachTensor(v, [&](const at::Tensor& t) {
      check.tensor(t);
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
    if (!traits.arg_is_out[i] &&
        !(schema.arguments()[i].alias_info() &&
          schema.arguments()[i].alias_info()->isWrite()))
      continue;
    forEachTensor(args[i], [&](const at::Tensor& t) {
      TORCH_CHECK(!t.defined() || isNeuron(t), traits.name,
                  ": the tensor written to (argument '",
                  schema.arguments()[i].name(), "') is on ", t.device(),
                  " but the op runs on neuron:", static_cast<int>(device));
    });
  }
  noteExecutedOnce(traits.name.c_str(), traits.noted);
  if (traits.call_check) traits.call_check(args);

  if (widen) {
    std::copy(args.begin(), args.end(), stack->end() - nargs);
    runWidened(op, traits.widen_mask, stack);
    return;
  }

  if (traits.meta_missing || traits.meta_differs ||
      !traits.tensor_returns_only) {
    runSynchronously(op, traits, stack, std::move(args), device);
    return;
  }

  // 1. Output metadata: from the cache, or from the Meta kernel.
  const size_t nret = schema.returns().size();
  MetaCacheKey key;
  bool cacheable = key.build(&schema, args);
  const CachedMeta* cached = cacheable ? findCachedMeta(key) : nullptr;
  CachedMeta computed;
  // A new argument signature runs as a validating item (see
  // first_call_validation.h); only new metadata can mean a new signature.
  MetaCacheKey signature;
  bool validate = false;
  if (!cached && cacheable) {
    signature.build(&schema, args, KeyKind::kSignature);
    validate = shouldValidate(signature);
  }
  if (!cached) {
    MetaMirror mirror;
    torch::jit::Stack meta_stack;
    meta_stack.reserve(nargs);
    for (const IValue& v : args)
      meta_stack.push_back(
          mapDevice(mapTensors(v, mirror), c10::Device(c10::kMeta)));
    std::vector<at::Tensor> meta_inputs = flatTensors(meta_stack);
    try {
      op.callBoxed(meta_stack);
    } catch (const c10::NotImplementedError& e) {
      traits.meta_missing = true;
      explainSynchronous(traits, e.what_without_backtrace());
      runSynchronously(op, traits, stack, std::move(args), device);
      return;
    } catch (const std::exception& e) {
      explainSynchronous(traits, e.what());
      runSynchronously(op, traits, stack, std::move(args), device);
      return;
    } catch (...) {
      // The Meta kernel rejected the inputs or needs the data (a
      // data-dependent shape; Python meta kernels raise Python errors): the
      // CPU kernel decides, and raises the user's error if there is one.
      runSynchronously(op, traits, stack, std::move(args), device);
      return;
    }
    for (size_t i = 0; i < nret; ++i) {
      std::vector<TensorMeta> r;
      forEachTensor(meta_stack[i], [&](const at::Tensor& t) {
        if (t.defined()) checkStridedResult(traits, t.layout());
        r.push_back(describe(t, meta_inputs));
      });
      computed.returns.push_back(std::move(r));
    }
    if (traits.adjust_meta) traits.adjust_meta(computed, args);
    if (cacheable) storeCachedMeta(key, computed);
    cached = &computed;
  }

  // 2. Results: in-place/out= results are the arguments (resized if the Meta
  // kernel resized them); views take the Meta view's geometry; the rest are
  // new device tensors.
  std::vector<at::Tensor> inputs = flatTensors(args);
  std::vector<IValue> outs(nret);
  std::vector<int> fresh;  // returns that need a copy from the CPU result
  bool needs_work = false;
  for (size_t i = 0; i < nret; ++i) {
    const std::vector<TensorMeta>& metas = cached->returns[i];
    bool is_list =
        schema.returns()[i].type()->kind() == c10::TypeKind::ListType;
    int a = traits.alias_arg[i];
    auto make = [&](const TensorMeta& m) -> at::Tensor {
      if (!m.defined) return at::Tensor();
      if (a >= 0 && !traits.alias_write[i]) {
        TORCH_INTERNAL_ASSERT(m.base >= 0, traits.name,
                              ": view result does not alias an input");
        return viewOf(inputs[m.base], m);
      }
      return emptyStrided(m.sizes, m.strides, m.dtype, device);
    };
    if (a >= 0 && traits.alias_write[i] && !is_list) {
      needs_work = true;
      const at::Tensor& real = args[a].toTensor();
      const TensorMeta& m = metas.at(0);
      if (real.sizes() != c10::IntArrayRef(m.sizes)) {
        real.resize_(m.sizes);
        if (real.strides() != c10::IntArrayRef(m.strides))
          real.unsafeGetTensorImpl()->set_sizes_and_strides(
              m.sizes, m.strides, real.storage_offset());
      }
      outs[i] = args[a];
    } else if (a >= 0 && traits.alias_write[i]) {
      needs_work = true;
      outs[i] = args[a];
    } else {
      if (a < 0) {
        needs_work = true;
        fresh.push_back(static_cast<int>(i));
      }
      if (is_list) {
        c10::List<at::Tensor> l;
        for (const TensorMeta& m : metas) l.push_back(make(m));
        outs[i] = l;
      } else {
        outs[i] = make(metas.at(0));
      }
    }
  }
  // Ops with no tensor results but side effects (e.g. _foreach_*_ returning
  // nothing) still have work to do.
  if (nret == 0) needs_work = true;

  if (needs_work) {
    // 3. One work item: the CPU kernel over aliases of the device memory.
    auto call = std::make_shared<CpuCall>(op);
    buildCpuArgs(*call, args, schema, device, /*fresh_out_args=*/false, traits);
    // The fresh results' device tensors, recorded after the arguments.
    auto targets = std::make_shared<std::vector<std::pair<int, IValue>>>();
    for (int i : fresh) targets->emplace_back(i, call->record(outs[i]));
    FailureSlot failure;
    if (validate) failure = std::make_shared<ValidationResult>();
    launch(device, traits.name.c_str(), [call, targets, failure] {
      runOnDeviceInto(failure, [&] {
        const AliasPlan::Built built = call->plan.build();
        size_t next = 0;
        const torch::jit::Stack stack = call->run(built, next);
        for (auto& [i, recorded] : *targets) {
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
      });
    });
    if (failure) finishValidation(device, failure, signature, key);
  }

  torch::jit::drop(*stack, nargs);
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
