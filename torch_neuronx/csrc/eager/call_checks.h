// Argument checks CUDA makes on the host that neither the Meta kernel nor
// the first-call validation (first_call_validation.h) catches, made at the
// call on the generic path: checks on floating-point values (left out of
// signatures so that changing values do not make every call wait), on
// sizes the Meta kernel does not look at, and on an out= tensor's overlap
// with the inputs as it is *before* the Meta kernel resizes it.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_neuronx {

using CallCheck = void (*)(const std::vector<c10::IValue>& args);

// The check for one operator overload, or null.
CallCheck callCheckFor(const c10::FunctionSchema& schema);

}  // namespace torch_neuronx
