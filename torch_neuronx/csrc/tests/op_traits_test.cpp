// OpTraits (eager/op_traits.h): what the generic device-op path works out
// from an operator's schema once — which returns alias which arguments,
// which arguments are out=, whether it draws random numbers, whether ATen
// has a CPU kernel the device could run.
#include "eager/op_traits.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch_neuronx/neuron.h>

namespace {

using torch_neuronx::OpTraits;
using torch_neuronx::traitsFor;

const OpTraits& traits(const char* name, const char* overload) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  return traitsFor(op);
}

class OpTraitsTest : public ::testing::Test {
 protected:
  void SetUp() override { torch_neuronx::init(); }
};

TEST_F(OpTraitsTest, AFunctionalOpReturnsFreshTensors) {
  const OpTraits& t = traits("aten::add", "Tensor");
  EXPECT_EQ(t.name, "aten::add.Tensor");
  ASSERT_EQ(t.alias_arg.size(), 1u);
  EXPECT_EQ(t.alias_arg[0], -1);
  EXPECT_FALSE(t.draws_random);
  EXPECT_FALSE(t.cpu_kernel_missing);
  EXPECT_TRUE(t.tensor_returns_only);
}

TEST_F(OpTraitsTest, InPlaceAndOutVariantsWriteTheirArgument) {
  const OpTraits& inplace = traits("aten::add_", "Tensor");
  ASSERT_EQ(inplace.alias_arg.size(), 1u);
  EXPECT_EQ(inplace.alias_arg[0], 0);  // self
  EXPECT_TRUE(inplace.alias_write[0]);
  const OpTraits& out = traits("aten::add", "out");
  ASSERT_EQ(out.alias_write.size(), 1u);
  EXPECT_TRUE(out.alias_write[0]);
  const int written = out.alias_arg[0];
  ASSERT_GE(written, 0);
  EXPECT_TRUE(out.arg_is_out[written]);
}

TEST_F(OpTraitsTest, AViewAliasesWithoutWriting) {
  const OpTraits& t = traits("aten::view", "");
  ASSERT_EQ(t.alias_arg.size(), 1u);
  EXPECT_EQ(t.alias_arg[0], 0);
  EXPECT_FALSE(t.alias_write[0]);
}

TEST_F(OpTraitsTest, RandomOpsAndCudaOnlyOpsAreKnown) {
  const OpTraits& bernoulli = traits("aten::bernoulli", "p");
  EXPECT_TRUE(bernoulli.draws_random);
  const OpTraits& normal = traits("aten::normal", "Tensor_float");
  EXPECT_TRUE(normal.draws_random);
  EXPECT_TRUE(normal.random_reads_values);  // its mean tensor's values
  // FlashAttention's kernel exists for CUDA only.
  const OpTraits& flash = traits("aten::_efficient_attention_forward", "");
  EXPECT_TRUE(flash.cpu_kernel_missing);
}

TEST_F(OpTraitsTest, TraitsAreBuiltOnce) {
  EXPECT_EQ(&traits("aten::mul", "Tensor"), &traits("aten::mul", "Tensor"));
}

}  // namespace
