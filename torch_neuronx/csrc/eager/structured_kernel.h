// The fast path for ATen's structured operators (add, mm, sum, softmax, ...).
//
// Structured ops come with a C++ meta function (at::meta::<op>) and a CPU
// out= kernel (at::cpu::<op>_out). Calling both directly skips the
// dispatcher on both sides: output metadata comes from the C++ meta function
// (the dispatcher's Meta key is served by slower Python meta kernels for
// most of these ops), and the work item's CPU kernel writes straight into
// the preallocated device output — no temporary, no extra copy.
// Registrations are generated (generated/structured_registrations.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "eager/cpu_alias.h"
#include "eager/dtype_widening.h"
#include "eager/first_call_validation.h"
#include "eager/meta_cache.h"
#include "eager/op_args.h"
#include "eager/op_stats.h"
#include "eager/run_on_device.h"
#include "core/memory_history.h"
#include "core/storage.h"
#include "core/stream.h"

namespace torch_neuronx::structured {

using Built = AliasPlan::Built;

// Encoding of non-tensor argument values into the metadata cache key.
inline void keyOf(MetaCacheKey& k, int64_t v) { k.addWord(v); }
inline void keyOf(MetaCacheKey& k, bool v) { k.addWord(v ? 3 : 2); }
inline void keyOf(MetaCacheKey& k, double v) { k.addDouble(v); }
inline void keyOf(MetaCacheKey& k, at::ScalarType v) {
  k.addWord(static_cast<int64_t>(v));
}
inline void keyOf(MetaCacheKey& k, const at::Scalar& v) { k.addScalar(v); }
inline void keyOf(MetaCacheKey& k, c10::string_view v) {
  k.addWord(static_cast<int64_t>(std::hash<c10::string_view>{}(v)));
}
inline void keyOf(MetaCacheKey& k, at::IntArrayRef v) {
  k.addWord(static_cast<int64_t>(v.size()));
  for (int64_t x : v) k.addWord(x);
}
inline void keyOf(MetaCacheKey& k, at::OptionalIntArrayRef v) {
  if (!v) {
    k.addWord(-1);
    return;
  }
  keyOf(k, *v);
}
template <typename T>
void keyOf(MetaCacheKey& k, const std::optional<T>& v) {
  k.addWord(v.has_value() ? 1 : 0);
  if (v) keyOf(k, *v);
}

// How each C++ argument type is checked, encoded in the metadata cache key,
// mirrored for the meta function, held by the work item, and passed to the
// CPU kernel.
template <typename T>
struct Arg {
  using Held = T;
  static void check(DeviceCheck&, const T&) {}
  static void key(MetaCacheKey& k, const T& v) { keyOf(k, v); }
  static const T& meta(MetaMirror&, const T& v) { return v; }
  static Held hold(AliasPlan&, const T& v) { return v; }
  static const T& pass(const Held& h, Built&) { return h; }
};

// A tensor argument is held as its index in the item's built aliases.
inline int holdTensor(AliasPlan& a, const at::Tensor& t) {
  if (!t.defined() || isNeuron(t)) return a.add(t);
  return a.keep(t.clone());  // a CPU scalar: its value as of the launch
}

template <>
struct Arg<at::Tensor> {
  using Held = int;
  static void check(DeviceCheck& c, const at::Tensor& t) { c.tensor(t); }
  static void key(MetaCacheKey& k, const at::Tensor& t) { k.addTensor(t); }
  static at::Tensor meta(MetaMirror& m, const at::Tensor& t) { return m(t); }
  static Held hold(AliasPlan& a, const at::Tensor& t) {
    return holdTensor(a, t);
  }
  static at::Tensor& pass(Held h, Built& b) { return b[h]; }
};

template <>
struct Arg<std::optional<at::Tensor>> {
  using T = std::optional<at::Tensor>;
  using Held = int;  // -1: none
  static void check(DeviceCheck& c, const T& t) {
    if (t) c.tensor(*t);
  }
  static void key(MetaCacheKey& k, const T& t) {
    k.addTensor(t ? *t : at::Tensor());
  }
  static T meta(MetaMirror& m, const T& t) {
    return t ? T(m(*t)) : std::nullopt;
  }
  static Held hold(AliasPlan& a, const T& t) {
    return t ? holdTensor(a, *t) : -1;
  }
  static T pass(Held h, Built& b) { return h < 0 ? T() : T(b[h]); }
};

template <>
struct Arg<at::ITensorListRef> {
  using Held = std::pair<int, int>;  // first index, count
  static void check(DeviceCheck& c, const at::ITensorListRef& l) {
    for (const at::Tensor& t : l) c.tensor(t);
  }
  static void key(MetaCacheKey& k, const at::ITensorListRef& l) {
    k.addWord(static_cast<int64_t>(l.size()));
    for (const at::Tensor& t : l) k.addTensor(t);
  }
  static std::vector<at::Tensor> meta(MetaMirror& m,
                                      const at::ITensorListRef& l) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : l) out.push_back(m(t));
    return out;
  }
  static Held hold(AliasPlan& a, const at::ITensorListRef& l) {
    Held h{-1, 0};
    for (const at::Tensor& t : l) {
      int i = holdTensor(a, t);  // consecutive indices
      if (h.first < 0) h.first = i;
      ++h.second;
    }
    return h;
  }
  static at::ITensorListRef pass(Held h, Built& b) {
    if (h.second == 0) return at::ITensorListRef(at::ArrayRef<at::Tensor>());
    return at::ITensorListRef(
        at::ArrayRef<at::Tensor>(b.data() + h.first, h.second));
  }
};

// Non-owning argument types are held by value in the work item.
template <>
struct Arg<at::IntArrayRef> {
  using Held = std::vector<int64_t>;
  static void check(DeviceCheck&, at::IntArrayRef) {}
  static void key(MetaCacheKey& k, at::IntArrayRef v) { keyOf(k, v); }
  static at::IntArrayRef meta(MetaMirror&, at::IntArrayRef v) { return v; }
  static Held hold(AliasPlan&, at::IntArrayRef v) { return v.vec(); }
  static at::IntArrayRef pass(const Held& h, Built&) { return h; }
};

template <>
struct Arg<at::OptionalIntArrayRef> {
  using Held = std::optional<std::vector<int64_t>>;
  static void check(DeviceCheck&, at::OptionalIntArrayRef) {}
  static void key(MetaCacheKey& k, at::OptionalIntArrayRef v) { keyOf(k, v); }
  static at::OptionalIntArrayRef meta(MetaMirror&, at::OptionalIntArrayRef v) {
    return v;
  }
  static Held hold(AliasPlan&, at::OptionalIntArrayRef v) {
    return v ? Held(v->vec()) : std::nullopt;
  }
  static at::OptionalIntArrayRef pass(const Held& h, Built&) {
    return h ? at::OptionalIntArrayRef(*h) : at::OptionalIntArrayRef();
  }
};

template <>
struct Arg<c10::string_view> {
  using Held = std::string;
  static void check(DeviceCheck&, c10::string_view) {}
  static void key(MetaCacheKey& k, c10::string_view v) { keyOf(k, v); }
  static c10::string_view meta(MetaMirror&, c10::string_view v) { return v; }
  static Held hold(AliasPlan&, c10::string_view v) { return std::string(v); }
  static c10::string_view pass(const Held& h, Built&) { return h; }
};

template <>
struct Arg<std::optional<c10::string_view>> {
  using T = std::optional<c10::string_view>;
  using Held = std::optional<std::string>;
  static void check(DeviceCheck&, const T&) {}
  static void key(MetaCacheKey& k, const T& v) { keyOf(k, v); }
  static const T& meta(MetaMirror&, const T& v) { return v; }
  static Held hold(AliasPlan&, const T& v) {
    return v ? Held(std::string(*v)) : std::nullopt;
  }
  static T pass(const Held& h, Built&) { return h ? T(*h) : std::nullopt; }
};

template <typename T>
using ArgOf = Arg<std::decay_t<T>>;

// ---- errors at the call (first_call_validation.h)

// The signature of the call being made on this thread.
inline MetaCacheKey& signatureKey() {
  thread_local MetaCacheKey k;
  return k;
}

// On a metadata-cache miss: a slot for the work item's error if the call's
// argument signature was never validated, else null.
template <typename... Args>
FailureSlot validationSlot(const char* name, const Args&... args) {
  MetaCacheKey& sig = signatureKey();
  sig.start(name, KeyKind::kSignature);
  (ArgOf<Args>::key(sig, args), ...);
  if (!shouldValidate(sig)) return nullptr;
  return std::make_shared<ValidationResult>();
}

// Queues a fast-path item; a validating one is waited for and raises here.
inline void launchHeld(c10::DeviceIndex device, const char* name,
                       neuron_rt::TaskPtr work, const FailureSlot& failure,
                       const MetaCacheKey& meta_key) {
  launchTask(device, name, std::move(work));
  if (failure) finishValidation(device, failure, signatureKey(), meta_key);
}

// ---- dtypes the CPU kernel lacks (dtype_widening.h)

template <typename T>
bool widens(uint64_t, const T&) {
  return false;
}
inline bool widens(uint64_t mask, const at::Tensor& t) {
  return needsWidening(mask, t);
}
inline bool widens(uint64_t mask, const std::optional<at::Tensor>& t) {
  return t && needsWidening(mask, *t);
}
inline bool widens(uint64_t mask, const at::ITensorListRef& l) {
  for (const at::Tensor& t : l)
    if (needsWidening(mask, t)) return true;
  return false;
}

// The op behind a kernel and the dtypes it widens, found on first use.
template <const char* Name>
struct Widening {
  c10::OperatorHandle op = operatorNamed(Name);
  uint64_t mask = widenedDtypes(op);
  static const Widening& get() {
    static const Widening w;
    return w;
  }
  // Runs the op widened (boxed); the stack is left holding its returns.
  template <typename... Args>
  static torch::jit::Stack run(Args... args) {
    torch::jit::Stack s = c10::impl::boxArgs<Args...>(args...);
    runWidened(get().op, get().mask, &s);
    return s;
  }
};

// ---- outputs: a Tensor or a tuple of Tensors

inline at::Tensor allocLike(const at::Tensor& m, c10::DeviceIndex device) {
  return emptyStrided(m.sizes(), m.strides(), m.scalar_type(), device);
}
template <typename... Ts>
std::tuple<Ts...> allocLike(const std::tuple<Ts...>& m,
                            c10::DeviceIndex device) {
  return std::apply(
      [&](const auto&... t) {
        return std::tuple<Ts...>(allocLike(t, device)...);
      },
      m);
}
// Output metadata as cached: one TensorMeta per returned tensor.
inline void describeOut(const at::Tensor& m, CachedMeta& c) {
  TensorMeta d;
  d.sizes = m.sizes().vec();
  d.strides = m.strides().vec();
  d.dtype = m.scalar_type();
  c.returns.push_back({std::move(d)});
}
template <typename... Ts>
void describeOut(const std::tuple<Ts...>& m, CachedMeta& c) {
  std::apply([&](const auto&... t) { (describeOut(t, c), ...); }, m);
}
inline at::Tensor allocFrom(const TensorMeta& m, c10::DeviceIndex device) {
  return emptyStrided(m.sizes, m.strides, m.dtype, device);
}
template <typename R>
struct AllocFromCache;
template <>
struct AllocFromCache<at::Tensor> {
  static at::Tensor make(const CachedMeta& c, c10::DeviceIndex d) {
    return allocFrom(c.returns[0][0], d);
  }
};
template <typename... Ts>
struct AllocFromCache<std::tuple<Ts...>> {
  template <size_t... I>
  static std::tuple<Ts...> makeI(const CachedMeta& c, c10::DeviceIndex d,
                                 std::index_sequence<I...>) {
    return std::tuple<Ts...>(allocFrom(c.returns[I][0], d)...);
  }
  static std::tuple<Ts...> make(const CachedMeta& c, c10::DeviceIndex d) {
    return makeI(c, d, std::index_sequence_for<Ts...>{});
  }
};

// Outputs are held like tensor arguments: their indices in the built aliases.
inline int aliasOut(AliasPlan& a, const at::Tensor& t) { return a.add(t); }
template <typename... Ts>
std::array<int, sizeof...(Ts)> aliasOut(AliasPlan& a,
                                        const std::tuple<Ts...>& t) {
  return std::apply(
      [&](const auto&... x) {
        return std::array<int, sizeof...(Ts)>{a.add(x)...};
      },
      t);
}

// Runs a CPU kernel over the item's aliases. A kernel may leave an output
// as a conjugate (or negative) view of what it wrote — linalg_lu_solve
// (left=False) does — which on the CPU is simply the tensor it returns. The
// device tensor keeps its own bits, so the values the view stands for are
// written through the alias with the bits it was built with.
template <typename F>
void runKeepingViewBits(Built& b, F&& kernel) {
  auto bits = [](const at::Tensor& t) {
    return (t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0);
  };
  c10::SmallVector<int, 6> before;
  for (const at::Tensor& t : b) before.push_back(bits(t));
  kernel();
  for (size_t k = 0; k < b.size(); ++k) {
    at::Tensor& t = b[k];
    if (!t.defined() || bits(t) == before[k]) continue;
    at::Tensor values = t.resolve_conj().resolve_neg();
    t._set_conj(before[k] & 1);
    t._set_neg(before[k] & 2);
    t.copy_(values);
  }
}

// A work item of the fast paths: the plan of its aliases and its arguments
// (tensors as alias indices), and the code that runs it, in one allocation.
template <typename Out, typename... Args>
struct HeldWork final : neuron_rt::Task {
  AliasPlan plan;
  std::tuple<typename ArgOf<Args>::Held...> args;
  Out out{};
  FailureSlot failure;  // set when the host validates this call
  void (*body)(HeldWork&) = nullptr;
  void run() override { body(*this); }
};

template <auto MetaFn, auto CpuOutFn, const char* Name,
          typename Sig = decltype(MetaFn)>
struct Functional;

template <auto MetaFn, auto CpuOutFn, const char* Name, typename Ret,
          typename... Args>
struct Functional<MetaFn, CpuOutFn, Name, Ret (*)(Args...)> {
  static Ret call(Args... args) {
    static std::atomic<uint32_t> noted{0};
    noteExecutedOnce(Name, noted);
    if (const uint64_t m = Widening<Name>::get().mask;
        (widens(m, args) || ...)) {
      torch::jit::Stack s = Widening<Name>::template run<Args...>(args...);
      return c10::impl::PopResult<Ret>::call(s);
    }
    AllocLabel label(Name);  // tags the output blocks for snapshots
    DeviceCheck dc;
    (ArgOf<Args>::check(dc, args), ...);
    c10::DeviceIndex device = dc.finish();
    // Output metadata: cached per argument signature, else from the meta
    // function (which also raises the user's shape and dtype errors).
    thread_local MetaCacheKey key;
    key.start(Name);
    (ArgOf<Args>::key(key, args), ...);
    Ret out;
    FailureSlot failure;
    if (const CachedMeta* cached = findCachedMeta(key)) {
      out = AllocFromCache<Ret>::make(*cached, device);
    } else {
      MetaMirror mm;
      Ret meta_out = MetaFn(ArgOf<Args>::meta(mm, args)...);
      CachedMeta fresh;
      describeOut(meta_out, fresh);
      storeCachedMeta(key, std::move(fresh));
      out = allocLike(meta_out, device);
      failure = validationSlot<Args...>(Name, args...);
    }
    using OutIndex = decltype(aliasOut(std::declval<AliasPlan&>(), out));
    using Work = HeldWork<OutIndex, Args...>;
    auto work = std::make_unique<Work>();
    work->args = {ArgOf<Args>::hold(work->plan, args)...};
    work->out = aliasOut(work->plan, out);
    work->failure = failure;
    work->body = [](Work& w) {
      runOnDeviceInto(w.failure, [&] {
        Built built = w.plan.build();
        runKeepingViewBits(
            built, [&] { run(built, w, std::index_sequence_for<Args...>{}); });
      });
    };
    launchHeld(device, Name, std::move(work), failure, key);
    return out;
  }

 private:
  template <typename Work, size_t... I>
  static void run(Built& b, Work& w, std::index_sequence<I...>) {
    if constexpr (std::is_same_v<Ret, at::Tensor>) {
      CpuOutFn(b[w.out], ArgOf<Args>::pass(std::get<I>(w.args), b)...);
    } else {
      std::apply(
          [&](auto... o) {
            CpuOutFn(b[o]..., ArgOf<Args>::pass(std::get<I>(w.args), b)...);
          },
          w.out);
    }
  }
};

template <auto MetaFn, auto CpuFn, const char* Name,
          typename Sig = decltype(MetaFn)>
struct Inplace;

template <auto MetaFn, auto CpuFn, const char* Name, typename... Rest>
struct Inplace<MetaFn, CpuFn, Name, at::Tensor& (*)(at::Tensor&, Rest...)> {
  static at::Tensor& call(at::Tensor& self, Rest... rest) {
    static std::atomic<uint32_t> noted{0};
    noteExecutedOnce(Name, noted);
    TORCH_CHECK(isNeuron(self), Name, ": the tensor written to is on ",
                self.device(), ", not on a neuron device");
    if (const uint64_t m = Widening<Name>::get().mask;
        widens(m, self) || (widens(m, rest) || ...)) {
      Widening<Name>::template run<at::Tensor&, Rest...>(self, rest...);
      return self;
    }
    DeviceCheck dc;
    dc.tensor(self);
    (ArgOf<Rest>::check(dc, rest), ...);
    c10::DeviceIndex device = dc.finish();
    // Validates shapes and dtypes now, so errors are raised at the op; a
    // signature that passed once passes again.
    thread_local MetaCacheKey key;
    key.start(Name);
    key.addTensor(self);
    (ArgOf<Rest>::key(key, rest), ...);
    FailureSlot failure;
    if (!findCachedMeta(key)) {
      MetaMirror mm;
      at::Tensor meta_self = mm(self);
      MetaFn(meta_self, ArgOf<Rest>::meta(mm, rest)...);
      storeCachedMeta(key, CachedMeta{});
      failure = validationSlot<at::Tensor, Rest...>(Name, self, rest...);
    }
    using Work = HeldWork<int, Rest...>;
    auto work = std::make_unique<Work>();
    work->out = work->plan.add(self);
    work->args = {ArgOf<Rest>::hold(work->plan, rest)...};
    work->failure = failure;
    work->body = [](Work& w) {
      runOnDeviceInto(w.failure, [&] {
        Built built = w.plan.build();
        runKeepingViewBits(
            built, [&] { run(built, w, std::index_sequence_for<Rest...>{}); });
      });
    };
    launchHeld(device, Name, std::move(work), failure, key);
    return self;
  }

 private:
  template <typename Work, size_t... I>
  static void run(Built& b, Work& w, std::index_sequence<I...>) {
    CpuFn(b[w.out], ArgOf<Rest>::pass(std::get<I>(w.args), b)...);
  }
};

}  // namespace torch_neuronx::structured
