// The public C++ API of the neuron backend in one include: devices and their
// guard, streams and their guard, synchronisation, the allocator, launching
// work on a stream. docs/cpp_extensions.md describes it;
// examples/cpp_extension/ is a custom op built on it.
#pragma once

#include <torch_neuronx/allocator.h>
#include <torch_neuronx/device.h>
#include <torch_neuronx/launch.h>
#include <torch_neuronx/macros.h>
#include <torch_neuronx/stream.h>
