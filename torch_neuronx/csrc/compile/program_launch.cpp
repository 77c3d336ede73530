#include "compile/program_launch.h"

#include <c10/util/Exception.h>

#include <array>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "core/stream.h"

namespace torch_neuronx {
namespace {

// Calls `f` with `n` int64 arguments. Inductor's C++ kernels take only
// pointers and int64 sizes, which the x86-64 and AArch64 calling conventions
// pass exactly like int64 values, so one signature per arity calls them all.
using Caller = void (*)(void*, const int64_t*);

template <size_t... I>
void callWith(void* f, const int64_t* a, std::index_sequence<I...>) {
  using Fn = void (*)(decltype((void)I, int64_t{})...);
  reinterpret_cast<Fn>(f)(a[I]...);
}

template <size_t N>
void callN(void* f, const int64_t* a) {
  callWith(f, a, std::make_index_sequence<N>{});
}

template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> makeCallers(
    std::index_sequence<N...>) {
  return {&callN<N>...};
}

constexpr auto kCallers =
    makeCallers(std::make_index_sequence<kMaxKernelArgs + 1>{});

}  // namespace

const char* internLabel(const std::string& s) {
  static std::mutex mu;
  static auto* labels = new std::unordered_set<std::string>();  // never freed
  std::lock_guard<std::mutex> g(mu);
  return labels->insert(s).first->c_str();
}

ProgramLaunch::ProgramLaunch(std::string name, c10::DeviceIndex device)
    : name_(std::move(name)), label_(internLabel(name_)), device_(device) {}

void ProgramLaunch::begin() {
  ++launches_;
  if (launchBlocking()) return;
  c10::Stream stream = currentStream(device_);
  runtimeStream(stream).beginBatch(label_);
  open_on_ = stream;
}

void ProgramLaunch::end() {
  if (!open_on_) return;
  c10::Stream stream = *open_on_;
  open_on_.reset();
  runtimeStream(stream).endBatch();
}

void ProgramLaunch::kernel(void* address, const char* label,
                           std::vector<int64_t> args,
                           std::vector<at::Tensor> keep_alive) {
  TORCH_CHECK(args.size() <= kMaxKernelArgs, "neuron: kernel ", label,
              " takes ", args.size(), " arguments; at most ", kMaxKernelArgs,
              " are supported");
  const Caller call = kCallers[args.size()];
  launch(device_, label,
         [call, address, args = std::move(args), keep = std::move(keep_alive)] {
           call(address, args.data());
         });
}

}  // namespace torch_neuronx
