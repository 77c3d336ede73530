// Warnings raised by CPU kernels inside work items.
//
// Work items run on stream worker threads, outside Python, where c10 would
// print every warning each time it is raised (on the host thread Python's
// warning filters show each one once). Device work prints each distinct
// warning once per process, naming the device.
#pragma once

namespace torch_neuronx {

// Installs the handler for the calling (worker) thread; cheap to repeat.
void useDeviceWarningHandler();

}  // namespace torch_neuronx
