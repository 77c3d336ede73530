// A copy of bits between two element types (program.h, Op::kRawCopy): what
// NKI's dtype-reinterpreting access patterns (`t.ap(..., dtype=X)`) move.
#pragma once

#include <string>
#include <vector>

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// Empty when the record is well formed: dst and src0 have the same first
// dimension and the same bytes per row (free elements x element size).
std::string rawCopyCheck(const Instruction& in,
                         const std::vector<Buffer>& bufs);

// Row r of dst (its free elements row-major, bytes in order) = row r of src0.
void rawCopy(const Instruction& in, const std::vector<Buffer>& bufs,
             char* const* base);

}  // namespace nki
}  // namespace neuron_rt
