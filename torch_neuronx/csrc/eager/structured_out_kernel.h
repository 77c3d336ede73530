// The fast path for the out= variants of ATen's structured operators
// (torch.add(a, b, out=c), torch.max(x, 1, out=(v, i)), ...).
//
// The out= meta function (at::meta::<op>_outf) runs on meta mirrors of the
// arguments, outputs included: it applies the structured rules exactly as
// on CPU and CUDA — the out dtype check, resizing with its warning for a
// non-empty output of the wrong shape, the overlap checks — and leaves the
// outputs' final geometry on the mirrors, which is then given to the device
// outputs. The work item runs the CPU out= kernel (at::cpu::<op>_outf) on
// aliases of the device outputs: sizes already match, so it writes in place
// (through its own proxy when an output's strides are not the kernel's).
// Results are cached per argument signature like the functional variants'.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "eager/structured_kernel.h"

namespace torch_neuronx::structured {

template <typename T>
inline constexpr bool kIsOut = std::is_same_v<T, at::Tensor&>;

// Gives a device output the geometry the meta function settled on.
inline void giveGeometry(at::Tensor& out, const TensorMeta& m) {
  if (out.sizes() != at::IntArrayRef(m.sizes)) out.resize_(m.sizes);
  if (out.strides() != at::IntArrayRef(m.strides) ||
      out.storage_offset() != m.storage_offset)
    out.as_strided_(m.sizes, m.strides, m.storage_offset);
}

inline TensorMeta geometryOf(const at::Tensor& m) {
  TensorMeta d;
  d.sizes = m.sizes().vec();
  d.strides = m.strides().vec();
  d.storage_offset = m.storage_offset();
  d.dtype = m.scalar_type();
  return d;
}

template <auto MetaFn, auto CpuFn, const char* Name,
          typename Sig = decltype(MetaFn)>
struct OutVariant;

template <auto MetaFn, auto CpuFn, const char* Name, typename Ret,
          typename... Args>
struct OutVariant<MetaFn, CpuFn, Name, Ret (*)(Args...)> {
  using Seq = std::index_sequence_for<Args...>;

  static Ret call(Args... args) {
    static std::atomic<uint32_t> noted{0};
    noteExecutedOnce(Name, noted);
    AllocLabel label(Name);
    const c10::DeviceIndex device = deviceOf(args...);
    if (const uint64_t m = Widening<Name>::get().mask;
        (widens(m, args) || ...)) {
      Widening<Name>::template run<Args...>(args...);
      return results(std::forward_as_tuple(args...));
    }
    thread_local MetaCacheKey key;
    key.start(Name);
    (ArgOf<Args>::key(key, args), ...);
    const CachedMeta* geometry = findCachedMeta(key);
    // Resizing an output that has elements warns: the meta function says so
    // each time, as on CPU.
    if (geometry && resizesNonEmpty(*geometry, args...)) geometry = nullptr;
    CachedMeta fresh;
    FailureSlot failure;
    if (!geometry) {
      fresh = runMeta(Seq{}, args...);
      storeCachedMeta(key, fresh);
      geometry = &fresh;
      failure = validationSlot<Args...>(Name, args...);
    }
    giveGeometries(*geometry, Seq{}, args...);
    using Work = HeldWork<int, Args...>;
    auto work = std::make_unique<Work>(Name, Outputs::kArguments);
    work->args = {ArgOf<Args>::hold(work->plan, args)...};
    noteOutputs(work->written, work->args, Seq{});
    work->failure = failure;
    work->kernel = [](Work& w, Built& b) { run(b, w.args, Seq{}); };
    {
      const AliasPlan& plan = work->plan;
      launchHeld(device, Name, std::move(work), failure, key, plan);
    }
    return results(std::forward_as_tuple(args...));
  }

 private:
  // Inputs follow the same-device rule; outputs must be on that device
  // (CUDA's message when they are not).
  static c10::DeviceIndex deviceOf(const Args&... args) {
    DeviceCheck dc;
    (noteArg<Args>(dc, args), ...);  // outputs come last: inputs decide
    const c10::DeviceIndex device = dc.finish();
    (checkOut<Args>(args, device), ...);
    return device;
  }
  template <typename T>
  static void noteArg(DeviceCheck& dc, const std::decay_t<T>& a) {
    if constexpr (kIsOut<T>) {
      if (isNeuron(a)) dc.device(a.device());
    } else {
      ArgOf<T>::check(dc, a);
    }
  }
  template <typename T>
  static void checkOut(const std::decay_t<T>& a, c10::DeviceIndex device) {
    if constexpr (kIsOut<T>) {
      const c10::Device want(c10::DeviceType::PrivateUse1, device);
      TORCH_CHECK(a.device() == want, "Expected out tensor to have device ",
                  want, ", but got ", a.device(), " instead");
    }
  }

  // The meta out= function on mirrors; returns each output's geometry.
  template <size_t... I>
  static CachedMeta runMeta(std::index_sequence<I...>, const Args&... args) {
    MetaMirror mm;
    auto mirrors = std::make_tuple(ArgOf<Args>::meta(mm, args)...);
    MetaFn(std::get<I>(mirrors)...);
    CachedMeta c;
    ((kIsOut<Args>
          ? c.returns.push_back({geometryOf(asTensor(std::get<I>(mirrors)))})
          : (void)0),
     ...);
    return c;
  }
  template <typename T>
  static const at::Tensor& asTensor(const T& t) {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      return t;
    } else {
      static const at::Tensor none;
      return none;  // never reached for outputs
    }
  }

  template <size_t... I>
  static void giveGeometries(const CachedMeta& c, std::index_sequence<I...>,
                             Args... args) {
    size_t k = 0;
    (giveOne<Args>(c, k, args), ...);
  }
  template <typename T>
  static void giveOne(const CachedMeta& c, size_t& k, T arg) {
    if constexpr (kIsOut<T>) giveGeometry(arg, c.returns[k++][0]);
  }

  static bool resizesNonEmpty(const CachedMeta& c, const Args&... args) {
    size_t k = 0;
    bool any = false;
    (checkResize<Args>(c, k, any, args), ...);
    return any;
  }
  template <typename T>
  static void checkResize(const CachedMeta& c, size_t& k, bool& any,
                          const std::decay_t<T>& a) {
    if constexpr (kIsOut<T>) {
      any |= a.numel() > 0 &&
             a.sizes() != at::IntArrayRef(c.returns[k].at(0).sizes);
      ++k;
    }
  }

  // Outputs are held as alias indices like tensor inputs (Arg<at::Tensor>)
  // and passed as the mutable aliases.
  template <typename Held, size_t... I>
  static void run(Built& b, Held& held, std::index_sequence<I...>) {
    CpuFn(ArgOf<Args>::pass(std::get<I>(held), b)...);
  }

  // The operands the kernel writes: the out= arguments' aliases.
  template <typename Held, size_t... I>
  static void noteOutputs(c10::SmallVector<int, 2>& w, const Held& held,
                          std::index_sequence<I...>) {
    (noteOut<Args>(w, std::get<I>(held)), ...);
  }
  template <typename T, typename H>
  static void noteOut(c10::SmallVector<int, 2>& w, const H& h) {
    if constexpr (kIsOut<T>) w.push_back(h);
  }

  // The outputs are the trailing arguments (the schema puts them last).
  template <typename Tuple>
  static Ret results(Tuple&& all) {
    constexpr size_t n = sizeof...(Args);
    if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      return std::get<n - 1>(all);
    } else {
      constexpr size_t k = std::tuple_size_v<Ret>;
      return tail<n - k>(all, std::make_index_sequence<k>{});
    }
  }
  template <size_t First, typename Tuple, size_t... I>
  static Ret tail(Tuple& all, std::index_sequence<I...>) {
    return Ret(std::get<First + I>(all)...);
  }
};

}  // namespace torch_neuronx::structured
