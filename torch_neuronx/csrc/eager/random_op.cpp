#include "eager/random_op.h"

#include <ATen/ATen.h>
#include <c10/util/ParallelGuard.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/generator.h"
#include "eager/alias_plan.h"
#include "eager/device_check.h"
#include "eager/ivalue_tensors.h"
#include "eager/op_stats.h"
#include "eager/random_op_traits.h"
#include "eager/synchronous_op.h"  // placeCpuResults, queueHostCopies

namespace torch_neuronx {
namespace {

using c10::IValue;

// A host tensor standing in for the device tensor `t`: the same sizes,
// strides and dtype, so the CPU kernel draws in the order it would draw for
// a CPU tensor like `t` (its values are never read).
at::Tensor standIn(const at::Tensor& t) {
  if (!t.defined() || !isNeuron(t)) return t;
  return at::empty_strided(t.sizes(), t.strides(),
                           t.options().device(c10::kCPU));
}

// Draws from this size on may use every thread (see runRandomOp).
constexpr int64_t kLargeDrawElements = int64_t{1} << 18;

}  // namespace

void runRandomOp(const c10::OperatorHandle& op, OpTraits& traits,
                 torch::jit::Stack* stack, std::vector<IValue> args,
                 c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  std::optional<at::Generator> gen;
  for (size_t i = 0; i < args.size(); ++i)
    if (isGeneratorArgument(schema.arguments()[i]) && args[i].isGenerator())
      gen = args[i].toGenerator();
  RandomDraw draw(gen, device);
  torch::jit::Stack cpu_stack;
  cpu_stack.reserve(args.size());
  // (device tensor, its stand-in) for every tensor the kernel writes.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    if (isGeneratorArgument(arg)) {
      cpu_stack.push_back(IValue(draw.cpuGenerator()));
      continue;
    }
    // What the kernel writes gets a stand-in; what it reads, its values when
    // they matter (waiting for them), else a stand-in too.
    const bool writes =
        arg.is_out() || (arg.alias_info() && arg.alias_info()->isWrite());
    const bool read_values =
        traits.random_reads_values &&
        (!writes || (i == 0 && readsWhatItWrites(traits.name)));
    auto to_host = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || !isNeuron(t)) return t;
      // A host copy is dense whatever the device tensor's layout: the copy
      // back goes element by element.
      at::Tensor host = read_values ? t.cpu() : standIn(t);
      if (writes) written.emplace_back(t, host);
      return host;
    };
    cpu_stack.push_back(
        mapDevice(mapTensors(args[i], to_host), c10::Device(c10::kCPU)));
  }
  {
    // The CPU kernel (every tensor is a host one). The CPU's random kernels
    // draw the same numbers whatever the thread count; a small draw runs on
    // this thread alone, as a parallel region would give the host thread an
    // OpenMP pool that slows every parallel kernel of the device
    // (core/compute_pool.h) for little gain. A large one keeps every thread
    // (bernoulli_ of 1M elements: 12 ms instead of 24 on 2 CPUs); the pool
    // is released when the copy is queued.
    int64_t largest = 0;
    for (const auto& [dst, host] : written)
      largest = std::max(largest, host.numel());
    c10::ParallelGuard serial(largest < kLargeDrawElements);
    op.callBoxed(cpu_stack);
  }
  // A device op whose numbers the host draws: executed, as TorchNeuron
  // reports random ops (not a CPU fallback).
  if (!written.empty()) {
    auto copies = std::make_shared<AliasPlan>();
    for (auto& [dst, cpu] : written) {
      resizeLikeCpuResult(dst, cpu);  // an out= argument the kernel resized
      copies->add(dst);
      copies->keep(cpu);
    }
    queueHostCopies(device, traits.name.c_str(), copies, written.size());
  }
  std::vector<IValue> outs = placeCpuResults(schema, traits, args, cpu_stack,
                                             device, /*copy_out_args=*/false);
  torch::jit::drop(*stack, args.size());
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
