// FNV-1a (Fowler-Noll-Vo, 64 bits) over 64-bit words: each word takes the
// place of one byte of the textbook algorithm (xor it in, then multiply by
// the prime). Not a cryptographic hash: for hash tables and for signatures
// that identify a sequence of small values (shapes, strides, op names,
// counts). Header-only, so that the backend (which links the runtime) uses
// the same one.
#pragma once

#include <cstdint>

namespace neuron_rt {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 1099511628211ull;

// `h` with `word` mixed in.
constexpr uint64_t fnv1aMix(uint64_t h, uint64_t word) {
  return (h ^ word) * kFnv1aPrime;
}

// The hash of a range of integer words, from `h` (the basis by default).
template <typename Range>
constexpr uint64_t fnv1aWords(const Range& words, uint64_t h = kFnv1aBasis) {
  for (auto w : words) h = fnv1aMix(h, static_cast<uint64_t>(w));
  return h;
}

}  // namespace neuron_rt
