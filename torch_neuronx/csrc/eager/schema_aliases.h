// Which argument a return of an operator aliases (in-place self, out=
// tensors, views), read from its schema's alias annotations.
#pragma once

#include <ATen/core/function_schema.h>

namespace torch_neuronx {

// Index of the argument return `ret` aliases, or -1 for a fresh result.
// Whether the alias is a write (in-place / out=) or a view is
// schema.returns()[ret].alias_info()->isWrite().
inline int aliasedArgument(const c10::FunctionSchema& schema, size_t ret) {
  const c10::AliasInfo* ai = schema.returns()[ret].alias_info();
  if (!ai) return -1;
  const auto& args = schema.arguments();
  for (size_t j = 0; j < args.size(); ++j) {
    const c10::AliasInfo* aj = args[j].alias_info();
    if (aj && aj->beforeSets() == ai->beforeSets()) return static_cast<int>(j);
  }
  return -1;
}

}  // namespace torch_neuronx
