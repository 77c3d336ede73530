// The hardware table: target names, the parse error, and the figures the
// roofline and the NKI cost model take from it (pinned: issue 32 calibrates
// them; a change here changes every estimate).
#include "neuron_runtime/hardware_table.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  // Per core, published.
  double core_bf16, core_fp32, core_fp8, dma_engine_gb_per_s;
  int chips_per_host;
  double efa_gbps;
};
constexpr Expected kExpected[] = {
    {Target::kTrn1, 190, 47.5, 820, 384, 2, 2.8, 1.12, 1.4, 1.4, 92, 23, 92,
     27.2, 16, 800},
    {Target::kTrn2, 667, 181, 2900, 1280, 8, 2.4, 0.96, 1.2, 1.2, 79, 20, 158,
     27.2, 16, 3200},
    {Target::kTrn3, 671, 183, 4900, 2560, 8, 2.4, 1.2, 1.2, 1.2, 79, 20, 315,
     38.4, 16, 3200},
};

TEST(HardwareTable, ModelFiguresPerCore) {
  for (const Expected& x : kExpected) {
    const HardwareSpec& s = hardwareSpec(x.target);
    const TrainiumModel& m = trainiumModel(x.target);
    EXPECT_EQ(m.name, targetName(x.target));
    // The published per-core tensor engine, not the chip's over its cores.
    EXPECT_DOUBLE_EQ(m.tensor_bf16_flops_per_ns, x.core_bf16 * 1e3);
    EXPECT_DOUBLE_EQ(m.tensor_fp32_flops_per_ns, x.core_fp32 * 1e3);
    EXPECT_DOUBLE_EQ(m.tensor_fp8_flops_per_ns, x.core_fp8 * 1e3);
    // ... which is the 128 x 128 PE array at the Tensor clock, within 4%.
    EXPECT_NEAR(m.tensor_bf16_flops_per_ns, 2 * 128 * 128 * x.tensor_ghz,
                0.04 * m.tensor_bf16_flops_per_ns);
    EXPECT_DOUBLE_EQ(m.vector_elems_per_ns,
                     128 * (x.vector_ghz + x.scalar_ghz));
    EXPECT_DOUBLE_EQ(m.hbm_bytes_per_ns, std::min(x.hbm_gb_per_s / x.cores,
                                                  16 * x.dma_engine_gb_per_s));
    EXPECT_DOUBLE_EQ(m.link_bytes_per_ns, x.link_gb_per_s / x.cores);
    EXPECT_DOUBLE_EQ(m.chip_link_bytes_per_ns, x.link_gb_per_s);
    EXPECT_DOUBLE_EQ(m.host_link_bytes_per_ns, x.efa_gbps / 8);
    EXPECT_EQ(m.chips_per_host, x.chips_per_host);
    EXPECT_DOUBLE_EQ(m.dma_start_ns, 1300.0);
    EXPECT_DOUBLE_EQ(m.fixed_ns, 2000.0);  // launch 700 + DMA start 1300
    EXPECT_DOUBLE_EQ(s.tensor_bf16_tflops, x.bf16_tflops);
    EXPECT_DOUBLE_EQ(s.tensor_fp32_tflops, x.fp32_tflops);
    EXPECT_EQ(s.dma_engines, 16);
  }
  // The chip's per-core share is above the per-core figure on every
  // generation (the estimates used it before issue 32).
  for (const Expected& x : kExpected)
    EXPECT_GT(x.bf16_tflops / x.cores, x.core_bf16 * 0.999);
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
