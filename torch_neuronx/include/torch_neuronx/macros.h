// Definitions every public header of torch_neuronx uses.
//
// The public C++ API of the neuron backend, for C++ extensions (custom ops,
// kernels) and libtorch programs: the headers under torch_neuronx/include
// (torch_neuronx.cpp_extension.include_paths()) and libtorch_neuronx.so
// (torch_neuronx.cpp_extension.library_paths()). Only what these headers
// declare is the API; the library's other symbols are internal.
#pragma once

// A function or class of libtorch_neuronx.so (default visibility, also when
// the including code is compiled with -fvisibility=hidden).
#define TORCH_NEURONX_API __attribute__((visibility("default")))

// Raised when a declaration of these headers changes incompatibly.
#define TORCH_NEURONX_CXX_API_VERSION 1
