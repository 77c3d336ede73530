// AliasPlan (eager/alias_plan.h): what a work item records of its tensors on
// the host and the CPU views it builds of their device memory when it runs.
#include "eager/alias_plan.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch_neuronx/neuron.h>

namespace {

using torch_neuronx::AliasPlan;
using torch_neuronx::kNeuron;

class AliasPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { torch_neuronx::init(); }
};

TEST_F(AliasPlanTest, AliasesShareTheDeviceBytesWithTheirGeometry) {
  at::Tensor base = at::arange(24, at::device(kNeuron).dtype(at::kFloat));
  torch_neuronx::deviceSynchronize();
  at::Tensor view = base.view({4, 6}).narrow(1, 2, 3);  // strided, offset 2
  AliasPlan plan;
  EXPECT_EQ(plan.add(view), 0);
  EXPECT_EQ(plan.count(), 1);
  EXPECT_EQ(plan.sizesOf(0), c10::IntArrayRef({4, 3}));
  EXPECT_EQ(plan.stridesOf(0), c10::IntArrayRef({6, 1}));
  EXPECT_EQ(plan.offsetOf(0), 2);
  EXPECT_EQ(plan.itemsizeOf(0), 4);
  const AliasPlan::Built built = plan.build();
  ASSERT_EQ(built.size(), 1u);
  const at::Tensor& alias = built[0];
  EXPECT_TRUE(alias.is_cpu());
  EXPECT_EQ(alias.sizes(), view.sizes());
  EXPECT_EQ(alias.strides(), view.strides());
  // The alias reads the device bytes: row 1 of the view is 8, 9, 10.
  EXPECT_EQ(alias[1][0].item<float>(), 8.0f);
  EXPECT_EQ(alias[1][2].item<float>(), 10.0f);
  // No copy: a write through the alias is the device tensor's.
  alias[0][0].fill_(-1.0f);
  EXPECT_EQ(base.cpu()[2].item<float>(), -1.0f);
}

TEST_F(AliasPlanTest, TensorsOfOneStorageShareOneCpuStorage) {
  at::Tensor base = at::zeros({8}, at::device(kNeuron));
  at::Tensor other = at::zeros({8}, at::device(kNeuron));
  AliasPlan plan;
  plan.add(base.narrow(0, 0, 4));
  plan.add(base.narrow(0, 4, 4));
  plan.add(other);
  EXPECT_EQ(plan.storageCount(), 2);
  EXPECT_EQ(plan.storageOf(0), plan.storageOf(1));
  EXPECT_NE(plan.storageOf(0), plan.storageOf(2));
  const AliasPlan::Built built = plan.build();
  // CPU kernels' overlap checks see the device's aliasing.
  EXPECT_TRUE(built[0].storage().is_alias_of(built[1].storage()));
  EXPECT_FALSE(built[0].storage().is_alias_of(built[2].storage()));
}

TEST_F(AliasPlanTest, UndefinedAndKeptHostTensorsKeepTheirPlace) {
  AliasPlan plan;
  at::Tensor scalar = at::scalar_tensor(3.5);
  EXPECT_EQ(plan.add(at::Tensor()), 0);
  EXPECT_EQ(plan.keep(scalar), 1);
  EXPECT_EQ(plan.storageOf(0), -1);
  EXPECT_EQ(plan.storageOf(1), -2);
  EXPECT_EQ(plan.itemsizeOf(0), 0);
  EXPECT_EQ(plan.itemsizeOf(1), 0);
  const AliasPlan::Built built = plan.build();
  EXPECT_FALSE(built[0].defined());
  EXPECT_EQ(built[1].item<double>(), 3.5);
}

}  // namespace
