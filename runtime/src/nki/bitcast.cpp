#include "neuron_runtime/nki/bitcast.h"

#include <cstring>

namespace neuron_rt {
namespace nki {

namespace {

int64_t freeCount(const Access& a) {
  int64_t n = 1;
  for (int d = 1; d < a.ndim; ++d) n *= a.size[d];
  return n;
}

// Byte addresses of row r's free elements, row-major.
void rowAddresses(const Access& a, int64_t r, char* base, int es,
                  std::vector<char*>& out) {
  const int64_t n = freeCount(a);
  out.resize(static_cast<size_t>(n));
  int64_t idx[kMaxDims] = {0, 0, 0, 0, 0};
  const int64_t start = a.offset + (a.ndim >= 1 ? r * a.stride[0] : 0);
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = start;
    for (int d = 1; d < a.ndim; ++d) off += idx[d] * a.stride[d];
    out[static_cast<size_t>(j)] = base + off * es;
    for (int d = a.ndim - 1; d >= 1; --d) {
      if (++idx[d] < a.size[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

std::string rawCopyCheck(const Instruction& in,
                         const std::vector<Buffer>& bufs) {
  const Access &d = in.dst, &s = in.src[0];
  if (d.ndim < 1 || s.ndim < 1 || d.size[0] != s.size[0])
    return "source and destination differ in rows";
  const int64_t db = freeCount(d) * elementSize(bufs[d.buffer].dtype);
  const int64_t sb = freeCount(s) * elementSize(bufs[s.buffer].dtype);
  if (db != sb)
    return "moves " + std::to_string(sb) + " bytes a row into " +
           std::to_string(db);
  return "";
}

void rawCopy(const Instruction& in, const std::vector<Buffer>& bufs,
             char* const* base) {
  const Access &d = in.dst, &s = in.src[0];
  const int des = elementSize(bufs[d.buffer].dtype);
  const int ses = elementSize(bufs[s.buffer].dtype);
  std::vector<char*> da, sa;
  std::vector<char> row;
  for (int64_t r = 0; r < d.size[0]; ++r) {
    rowAddresses(s, r, base[s.buffer], ses, sa);
    rowAddresses(d, r, base[d.buffer], des, da);
    row.resize(sa.size() * ses);
    for (size_t j = 0; j < sa.size(); ++j)
      std::memcpy(row.data() + j * ses, sa[j], ses);
    for (size_t j = 0; j < da.size(); ++j)
      std::memcpy(da[j], row.data() + j * des, des);
  }
}

}  // namespace nki
}  // namespace neuron_rt
