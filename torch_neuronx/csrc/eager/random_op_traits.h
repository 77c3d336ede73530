// Which ops draw random numbers, and whether their draws depend on device
// values (eager/random_op.h runs them accordingly): from the schema, once per
// op, when its traits are made (eager/op_traits.cpp).
#pragma once

#include <ATen/core/function_schema.h>

#include <string>

#include "eager/op_traits.h"

namespace torch_neuronx {

// A `Generator` or `Generator?` argument.
bool isGeneratorArgument(const c10::Argument& arg);

// An in-place random op that reads the tensor it writes (the others —
// normal_, uniform_, bernoulli_, ... — overwrite it whole).
bool readsWhatItWrites(const std::string& name);

// Sets traits.draws_random and traits.random_reads_values from the schema.
void classifyRandomOp(const c10::FunctionSchema& schema, OpTraits& traits);

}  // namespace torch_neuronx
