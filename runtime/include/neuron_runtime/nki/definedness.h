// The uninitialised-memory check of a tile program.
//
// Tiles and HBM scratch start undefined (the vendor simulator fills them
// with NaN and reads on). Definedness flows with the data, element by
// element, as valgrind tracks it: an instruction's result is undefined where
// any input it was computed from is. Computing on undefined elements is
// harmless (a masked tail row of a tile); it is an error when such a value
// reaches a kernel result in HBM. The error names the instruction that first
// read the never-written memory, and the store that published it.
#pragma once

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// Throws ProgramError (loc: the first read of never-written memory whose
// values reach an argument or result buffer).
void checkDefinedness(const Program& program);

}  // namespace nki
}  // namespace neuron_rt
