// The hardware table: target names, the parse error, and the figures the
// roofline and the NKI cost model take from it (pinned: issue 32 calibrates
// them; a change here changes every estimate).
#include "neuron_runtime/hardware_table.h"

#include <gtest/gtest.h>

#include <string>

#include "neuron_runtime/nki/cost_model.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/trainium_estimate.h"

namespace neuron_rt {
namespace {

TEST(HardwareTable, NamesParseBackToTheirTargets) {
  EXPECT_EQ(targetNames(), "trn1, trn2, trn3");
  for (int k = 0; k < kTargets; ++k) {
    const auto t = static_cast<Target>(k);
    EXPECT_EQ(hardwareSpec(t).target, t);
    EXPECT_EQ(parseTarget(targetName(t)), t);
  }
  EXPECT_EQ(kDefaultTarget, Target::kTrn2);
}

TEST(HardwareTable, AnUnknownNameListsTheValidOnes) {
  for (const char* bad : {"trn9", "", "TRN2", "trn2 "}) {
    try {
      parseTarget(bad);
      ADD_FAILURE() << "parsed '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()), std::string("unknown target '") + bad +
                                           "' (valid: trn1, trn2, trn3)");
    }
  }
}

// What one NeuronCore of a target is estimated with.
struct Expected {
  Target target;
  double bf16_tflops, fp32_tflops, hbm_gb_per_s, link_gb_per_s;
  int cores;
  double tensor_ghz, vector_ghz, scalar_ghz, gpsimd_ghz;
};
constexpr Expected kExpected[] = {
    {Target::kTrn1, 190, 47.5, 820, 384, 2, 2.8, 1.12, 1.4, 1.4},
    {Target::kTrn2, 667, 181, 2900, 1280, 8, 2.4, 0.96, 1.2, 1.2},
    {Target::kTrn3, 671, 183, 4900, 2560, 8, 2.4, 1.2, 1.2, 1.2},
};

TEST(HardwareTable, RooflineFiguresPerCore) {
  for (const Expected& x : kExpected) {
    const TrainiumModel& m = trainiumModel(x.target);
    EXPECT_EQ(m.name, targetName(x.target));
    EXPECT_DOUBLE_EQ(m.tensor_bf16_flops_per_ns, x.bf16_tflops * 1e3 / x.cores);
    EXPECT_DOUBLE_EQ(m.tensor_fp32_flops_per_ns, x.fp32_tflops * 1e3 / x.cores);
    EXPECT_DOUBLE_EQ(m.vector_elems_per_ns, 2 * 128 * x.vector_ghz);
    EXPECT_DOUBLE_EQ(m.hbm_bytes_per_ns, x.hbm_gb_per_s / x.cores);
    EXPECT_DOUBLE_EQ(m.link_bytes_per_ns, x.link_gb_per_s / x.cores);
    EXPECT_DOUBLE_EQ(m.fixed_ns, 2000.0);
    EXPECT_DOUBLE_EQ(m.hop_latency_ns, 2000.0);
  }
  // The figures the estimates were made with before the table.
  EXPECT_DOUBLE_EQ(trainiumModel(Target::kTrn2).tensor_bf16_flops_per_ns,
                   667e3 / 8);
  EXPECT_DOUBLE_EQ(trainiumModel(Target::kTrn1).hbm_bytes_per_ns, 820.0 / 2);
}

TEST(HardwareTable, LogicalCoresOnlyWhereTheGenerationHasThem) {
  EXPECT_FALSE(hardwareSpec(Target::kTrn1).logical_cores);
  EXPECT_TRUE(hardwareSpec(Target::kTrn2).logical_cores);
  EXPECT_TRUE(hardwareSpec(Target::kTrn3).logical_cores);
  const TrainiumModel& trn3 = trainiumModel(Target::kTrn3);
  EXPECT_DOUBLE_EQ(logicalCoreModel(trn3, 2).hbm_bytes_per_ns,
                   2 * trn3.hbm_bytes_per_ns);
}

TEST(HardwareTable, CostModelClocksAndBandwidth) {
  EXPECT_EQ(&nki::costParameters(kDefaultTarget),
            &nki::defaultCostParameters());
  for (const Expected& x : kExpected) {
    const nki::CostParameters& p = nki::costParameters(x.target);
    EXPECT_DOUBLE_EQ(p.tensor_ghz, x.tensor_ghz);
    EXPECT_DOUBLE_EQ(p.vector_ghz, x.vector_ghz);
    EXPECT_DOUBLE_EQ(p.scalar_ghz, x.scalar_ghz);
    EXPECT_DOUBLE_EQ(p.gpsimd_ghz, x.gpsimd_ghz);
    EXPECT_DOUBLE_EQ(p.hbm_bytes_per_ns, x.hbm_gb_per_s / x.cores);
    EXPECT_DOUBLE_EQ(p.dma_latency_ns, 2000.0);
    EXPECT_DOUBLE_EQ(p.dma_issue_ns, 600.0);
  }
}

}  // namespace
}  // namespace neuron_rt
