// Python stacks in the allocator's history (core/memory_history) without
// Python in the backend: libtorch_neuronx.so links no Python, so the bindings
// module (torch_neuronx._C) tells it, at import, how to recognise a thread
// that Python knows. Until then (a libtorch program) no stack is gathered.
#pragma once

namespace torch_neuronx {

// Whether the calling thread is one Python knows, so that gathering its stack
// may take the GIL.
using PythonThreadProbe = bool (*)();
void setPythonThreadProbe(PythonThreadProbe probe);

}  // namespace torch_neuronx
