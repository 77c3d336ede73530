#include "neuron_runtime/fnv1a.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace neuron_rt {
namespace {

TEST(Fnv1aTest, WordsAreMixedAsTheTextbookMixesBytes) {
  // One byte-sized word: the textbook 64-bit FNV-1a of "a".
  EXPECT_EQ(fnv1aWords(std::vector<uint8_t>{'a'}), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1aWords(std::vector<uint8_t>{'f', 'o', 'o'}),
            0xdcb27518fed9d577ull);
  EXPECT_EQ(fnv1aWords(std::vector<int>{}), kFnv1aBasis);
  EXPECT_EQ(fnv1aMix(kFnv1aBasis, 7), (kFnv1aBasis ^ 7) * kFnv1aPrime);
}

TEST(Fnv1aTest, OrderMattersAndContinuationEqualsWhole) {
  const std::vector<int64_t> ab{1, 2}, ba{2, 1};
  EXPECT_NE(fnv1aWords(ab), fnv1aWords(ba));
  const std::vector<int64_t> a{1}, b{2};
  EXPECT_EQ(fnv1aWords(b, fnv1aWords(a)), fnv1aWords(ab));
  static_assert(fnv1aMix(0, 1) == kFnv1aPrime,
                "usable in constant expressions");
}

}  // namespace
}  // namespace neuron_rt
