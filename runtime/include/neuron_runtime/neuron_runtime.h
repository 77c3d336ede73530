// Umbrella header of the simulated NeuronCore runtime.
#pragma once

#include "neuron_runtime/device.h"
#include "neuron_runtime/event.h"
#include "neuron_runtime/hbm_arena.h"
#include "neuron_runtime/runtime.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/topology.h"
#include "neuron_runtime/trace.h"
