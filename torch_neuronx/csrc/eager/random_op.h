// Random ops on neuron (ops that take a Generator): drawn on the host at the
// call from the device's CPU generator with the CPU's own kernel, so that
// they draw the numbers the CPU draws after the same seed, in call order
// (core/generator.h), and the draw never waits for the device unless its
// result depends on device values:
// - an op that only writes its tensors (normal_, uniform_, random_,
//   exponential_, bernoulli_.float, the out= factories) or reads them only
//   for their shape (bernoulli.p) draws into host stand-ins of them, and one
//   queued item copies the numbers in;
// - an op whose result depends on the values it reads (bernoulli with a
//   tensor of probabilities, normal with tensor means or deviations,
//   multinomial, poisson, binomial, _standard_gamma, rrelu_with_noise, ...)
//   waits for those inputs and runs its kernel on host copies of them (what
//   it writes still gets stand-ins and the queued copy).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

#include "eager/op_traits.h"

namespace torch_neuronx {

// The boxed path of a random op (traits.draws_random), its arguments checked
// and on `device`.
void runRandomOp(const c10::OperatorHandle& op, OpTraits& traits,
                 torch::jit::Stack* stack, std::vector<c10::IValue> args,
                 c10::DeviceIndex device);

}  // namespace torch_neuronx
