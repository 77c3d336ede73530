// The estimate model's rules (trainium_estimate.h), one test each: the parts
// explain the total, tile quantisation of matmuls on the PE array, DMA
// efficiency rising with the transfer's size, overlap within its bounds, a
// compiled program's pipeline, collectives on the topology's tiers, logical
// cores, target selection.
#include "neuron_runtime/trainium_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

const TrainiumModel& trn2() { return trainiumModel(Target::kTrn2); }

ItemWork matmulWork(double m, double k, double n, int element_bytes) {
  ItemWork w;
  w.tensor_engine = true;
  w.element_bytes = element_bytes;
  w.matmuls.push_back(MatmulShape{1, m, k, n});
  w.flops = 2 * m * k * n;
  for (double b : {m * k, k * n, m * n})
    w.transfers.push_back(Transfer{b * element_bytes, 0});
  for (const Transfer& t : w.transfers) w.bytes += t.bytes;
  return w;
}

void expectParts(const EstimateParts& p) {
  EXPECT_GE(p.compute_ns, 0);
  EXPECT_GE(p.dma_ns, 0);
  EXPECT_GE(p.latency_ns, 0);
  EXPECT_GE(p.overlap_ns, 0);
  EXPECT_LE(p.overlap_ns, std::min(p.compute_ns, p.dma_ns) + 1e-9);
}

TEST(EstimateParts, TheTotalIsComputePlusDmaPlusLatencyMinusOverlap) {
  for (int eb : {1, 2, 4})
    for (double n : {1.0, 64.0, 1000.0, 4096.0}) {
      const EstimateParts p = estimateItem(matmulWork(n, n, n, eb), trn2());
      expectParts(p);
      EXPECT_EQ(roundedNs(p), std::llround(p.compute_ns + p.dma_ns +
                                           p.latency_ns - p.overlap_ns));
    }
}

TEST(TileQuantisation, FullTilesRunAtThePublishedPeak) {
  // 128 x 128 stationary tiles, 512-wide moving chunks: no waste.
  const MatmulShape s{1, 1024, 1024, 1024};
  EXPECT_NEAR(matmulNs(s, 2, trn2()),
              2.0 * 1024 * 1024 * 1024 / trn2().tensor_bf16_flops_per_ns, 1e-6);
  // fp32 at its (four-pass) peak, fp8 at its own.
  EXPECT_NEAR(matmulNs(s, 4, trn2()),
              2.0 * 1024 * 1024 * 1024 / trn2().tensor_fp32_flops_per_ns, 1e-6);
  EXPECT_NEAR(matmulNs(s, 1, trn2()),
              2.0 * 1024 * 1024 * 1024 / trn2().tensor_fp8_flops_per_ns, 1e-6);
}

TEST(TileQuantisation, PartialTilesCostWholeOnes) {
  const TrainiumModel& m = trn2();
  // One more contraction element than a tile (the 128 partitions): a second
  // tile, the time of two full ones, whichever operand is stationary.
  EXPECT_DOUBLE_EQ(matmulNs({1, 128, 129, 512}, 2, m),
                   matmulNs({1, 128, 256, 512}, 2, m));
  EXPECT_DOUBLE_EQ(matmulNs({1, 128, 129, 512}, 2, m),
                   2 * matmulNs({1, 128, 128, 512}, 2, m));
  // One more stationary row than a tile (when the other side is no better
  // as the stationary one): twice the time.
  EXPECT_DOUBLE_EQ(matmulNs({1, 129, 128, 129}, 2, m),
                   2 * matmulNs({1, 128, 128, 129}, 2, m));
  // The moving side streams a column a cycle, at least min cycles an
  // instruction: a 1-row product costs as a 64-row one.
  EXPECT_DOUBLE_EQ(matmulNs({1, 1, 128, 128}, 2, m),
                   matmulNs({1, 64, 128, 128}, 2, m));
  EXPECT_DOUBLE_EQ(matmulNs({1, 128, 128, 8}, 2, m),
                   matmulNs({1, 128, 128, 64}, 2, m));
  EXPECT_LT(matmulNs({1, 128, 128, 64}, 2, m),
            matmulNs({1, 128, 128, 65}, 2, m));
  // Small or odd matmuls are slower than their flops at the peak.
  for (const MatmulShape& s :
       {MatmulShape{1, 1, 4096, 4096}, MatmulShape{1, 130, 130, 130},
        MatmulShape{8, 33, 77, 200}}) {
    const double at_peak =
        2 * s.batch * s.m * s.k * s.n / m.tensor_bf16_flops_per_ns;
    EXPECT_GT(matmulNs(s, 2, m), at_peak);
  }
  // The cheaper orientation: a (1 x k) @ (k x n) row keeps the large
  // operand stationary, as (n x k) @ (k x 1) does.
  EXPECT_DOUBLE_EQ(matmulNs({1, 1, 4096, 4096}, 2, m),
                   matmulNs({1, 4096, 4096, 1}, 2, m));
  // Batches add up.
  EXPECT_DOUBLE_EQ(matmulNs({3, 100, 100, 100}, 2, m),
                   3 * matmulNs({1, 100, 100, 100}, 2, m));
}

TEST(DmaEfficiency, RisesMonotonicallyWithTheTransfer) {
  const TrainiumModel& m = trn2();
  double last_eff = 0, last_rate = 0;
  for (double b = 64; b <= (1 << 28); b *= 2) {
    const double eff = dmaEfficiency(b / m.pe_rows, m);
    const double rate = b / transferNs(Transfer{b, 0}, m);
    EXPECT_GT(eff, last_eff);
    EXPECT_GT(rate, last_rate);
    EXPECT_LE(rate, m.hbm_bytes_per_ns);
    last_eff = eff;
    last_rate = rate;
  }
  // Half the peak at the half-payload; 4 KiB per partition near it; small
  // transfers far below.
  EXPECT_DOUBLE_EQ(dmaEfficiency(m.dma_half_payload_bytes, m), 0.5);
  EXPECT_GT(dmaEfficiency(4096, m), 0.85);
  EXPECT_LT(dmaEfficiency(64, m), 0.15);
  // A tensor of few elements uses few partitions: one element's transfer
  // pays one partition's overhead, not 128.
  EXPECT_LT(transferNs(Transfer{4, 0, 4}, m), transferNs(Transfer{4, 0, 0}, m));
  EXPECT_NEAR(transferNs(Transfer{4, 0, 4}, m),
              (4 + m.dma_half_payload_bytes) / m.hbm_bytes_per_ns, 1e-9);
  // A strided transfer moves rows of its contiguous run.
  EXPECT_GT(transferNs(Transfer{1 << 20, 64}, m),
            transferNs(Transfer{1 << 20, 0}, m));
}

TEST(Overlap, BoundedByTheShorterSideAndGrowingWithTiles) {
  const TrainiumModel& m = trn2();
  // One tile: load, compute, store one after another.
  ItemWork small;
  small.flops = 1000;
  small.bytes = 3 * 1000 * 4;
  const EstimateParts one = estimateItem(small, m);
  EXPECT_EQ(one.overlap_ns, 0);
  // Many tiles: nearly the shorter side hides.
  ItemWork big;
  big.flops = 1 << 26;
  big.bytes = 3.0 * (1 << 26) * 4;
  const EstimateParts many = estimateItem(big, m);
  expectParts(many);
  EXPECT_GT(many.overlap_ns, 0.99 * std::min(many.compute_ns, many.dma_ns));
  // Never below the roofline: an item takes at least its longer side.
  for (double n : {16.0, 300.0, 2048.0, 8192.0}) {
    const EstimateParts p = estimateItem(matmulWork(n, n, n, 2), m);
    expectParts(p);
    EXPECT_GE(p.totalNs(),
              std::max(p.compute_ns, p.dma_ns) + p.latency_ns - 1e-9);
  }
}

TEST(Latency, AnEagerItemPaysItsLaunchAndOneDmaStart) {
  const TrainiumModel& m = trn2();
  ItemWork w;
  w.flops = 10;
  w.bytes = 40;
  EXPECT_DOUBLE_EQ(estimateItem(w, m).latency_ns, m.launch_ns + m.dma_start_ns);
  EXPECT_DOUBLE_EQ(m.fixed_ns, m.launch_ns + m.dma_start_ns);
  w.launch = false;  // a program's step, a copy
  EXPECT_DOUBLE_EQ(estimateItem(w, m).latency_ns, m.dma_start_ns);
  w.bytes = 0;
  EXPECT_DOUBLE_EQ(estimateItem(w, m).latency_ns, 0);
}

TEST(ProgramPipeline, StepsOverlapAcrossTheProgram) {
  const TrainiumModel& m = trn2();
  ItemWork compute_bound = matmulWork(2048, 2048, 2048, 2);
  ItemWork memory_bound;
  memory_bound.flops = 1 << 20;
  memory_bound.bytes = 64.0 * (1 << 20);
  compute_bound.launch = memory_bound.launch = false;
  const std::vector<EstimateParts> steps = {estimateItem(compute_bound, m),
                                            estimateItem(memory_bound, m)};
  const EstimateParts prog = programEstimate(steps, m);
  expectParts(prog);
  double sum = 0, compute = 0, dma = 0;
  for (const EstimateParts& s : steps) {
    sum += s.totalNs();
    compute += s.compute_ns;
    dma += s.dma_ns;
  }
  // One launch, one DMA start, a roofline over the steps.
  EXPECT_DOUBLE_EQ(prog.latency_ns, m.launch_ns + m.dma_start_ns);
  EXPECT_DOUBLE_EQ(prog.overlap_ns, std::min(compute, dma));
  EXPECT_NEAR(prog.totalNs(), std::max(compute, dma) + prog.latency_ns, 1e-6);
  EXPECT_LT(prog.totalNs(), sum);  // not the plain sum
  // One step: the step itself, with a launch.
  const EstimateParts single = programEstimate({steps[1]}, m);
  EXPECT_LE(single.totalNs(), steps[1].totalNs() + m.launch_ns + 1e-9);
}

std::vector<int> range(int from, int n, int stride = 1) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(from + i * stride);
  return out;
}

TEST(CollectiveTopology, TiersChipLinkHost) {
  const TrainiumModel& m = logicalCoreModel(trn2(), 2);  // 4 ranks a chip
  const double big = 256.0 * (1 << 20);
  // Within one chip: its CC cores shared by the group's ranks on it.
  const EstimateParts chip =
      collectiveEstimate(CollectiveShape::kAllGather, big, range(0, 4), m);
  EXPECT_NEAR(chip.dma_ns, 0.75 * big / (m.cc_bytes_per_ns / 4), 1e-3);
  // One rank on each of 4 chips: NeuronLink, one rank per chip.
  const EstimateParts link =
      collectiveEstimate(CollectiveShape::kAllGather, big, range(0, 4, 4), m);
  EXPECT_NEAR(
      link.dma_ns,
      0.75 * big / std::min(m.cc_bytes_per_ns, m.chip_link_bytes_per_ns / 2),
      1e-3);
  // One rank on each of 4 hosts: EFA, the slowest link.
  const EstimateParts efa =
      collectiveEstimate(CollectiveShape::kAllGather, big, range(0, 4, 64), m);
  EXPECT_NEAR(efa.dma_ns,
              0.75 * big /
                  std::min({m.cc_bytes_per_ns, m.chip_link_bytes_per_ns / 2,
                            m.host_link_bytes_per_ns}),
              1e-3);
  EXPECT_GT(efa.totalNs(), link.totalNs());
  // Latency per tier: a host step costs more than a chip step.
  const double tiny = 64;
  const EstimateParts in_chip =
      collectiveEstimate(CollectiveShape::kAllReduce, tiny, {0, 1}, m);
  const EstimateParts across_chips =
      collectiveEstimate(CollectiveShape::kAllReduce, tiny, {0, 4}, m);
  const EstimateParts across_hosts =
      collectiveEstimate(CollectiveShape::kAllReduce, tiny, {0, 64}, m);
  EXPECT_DOUBLE_EQ(in_chip.latency_ns,
                   m.collective_fixed_ns + 2 * m.hop_latency_ns);
  EXPECT_DOUBLE_EQ(across_chips.latency_ns,
                   m.collective_fixed_ns + 2 * m.link_hop_latency_ns);
  // Across hosts the fixed cost is the hosts' (nccom-test's two-host
  // figures), higher from efa_large_message_bytes on.
  EXPECT_DOUBLE_EQ(across_hosts.latency_ns,
                   m.efa_collective_fixed_ns + 2 * m.efa_hop_latency_ns);
  EXPECT_DOUBLE_EQ(collectiveEstimate(CollectiveShape::kAllReduce,
                                      m.efa_large_message_bytes, {0, 64}, m)
                       .latency_ns,
                   m.efa_collective_fixed_large_ns + 2 * m.efa_hop_latency_ns);
  EXPECT_GT(m.efa_collective_fixed_large_ns, m.efa_collective_fixed_ns);
  EXPECT_GT(m.efa_collective_fixed_ns, m.collective_fixed_ns);
  // Placement overrides: 8 ranks a chip puts 0 and 4 on one chip.
  EXPECT_DOUBLE_EQ(
      collectiveEstimate(CollectiveShape::kAllReduce, tiny, {0, 4}, m, {8, 0})
          .latency_ns,
      in_chip.latency_ns);
  // chips_per_host 1: ranks on two chips are on two hosts.
  EXPECT_DOUBLE_EQ(
      collectiveEstimate(CollectiveShape::kAllReduce, tiny, {0, 4}, m, {0, 1})
          .latency_ns,
      across_hosts.latency_ns);
}

TEST(CollectiveTopology, LatencyTakesTheShorterAlgorithm) {
  const TrainiumModel& m = trn2();
  // 64 ranks of a host: recursive doubling's 6 steps, not the ring's 63.
  const EstimateParts p =
      collectiveEstimate(CollectiveShape::kAllGather, 8, range(0, 64), m);
  EXPECT_LT(p.latency_ns, m.collective_fixed_ns + 8 * m.link_hop_latency_ns);
  // One rank: its start and finish only.
  const EstimateParts one =
      collectiveEstimate(CollectiveShape::kAllReduce, 1 << 20, {5}, m);
  EXPECT_DOUBLE_EQ(one.dma_ns, 0);
  EXPECT_DOUBLE_EQ(one.latency_ns, m.collective_fixed_ns);
  // Bytes and ranks make it longer; an all-reduce moves twice an
  // all-gather's bytes.
  EXPECT_GT(collectiveNs(CollectiveShape::kAllReduce, 1 << 24, 8, m),
            collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 8, m));
  EXPECT_GT(collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 8, m),
            collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 2, m));
  EXPECT_GT(collectiveNs(CollectiveShape::kAllReduce, 1 << 24, 8, m),
            collectiveNs(CollectiveShape::kAllGather, 1 << 24, 8, m));
}

TEST(CollectiveTopology, KindsParseByName) {
  for (const char* k : {"allreduce", "allgather", "reducescatter", "alltoall",
                        "broadcast", "reduce", "p2p", "barrier"})
    EXPECT_STREQ(collectiveShapeName(parseCollectiveShape(k)), k);
  try {
    parseCollectiveShape("allsum");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("valid: allreduce"),
              std::string::npos);
  }
}

TEST(LogicalCores, EnginesAndBandwidthAddUpLatenciesStay) {
  const TrainiumModel lnc2 = logicalCoreModel(trn2(), 2);
  EXPECT_EQ(lnc2.physical_cores, 2);
  EXPECT_DOUBLE_EQ(lnc2.tensor_bf16_flops_per_ns,
                   2 * trn2().tensor_bf16_flops_per_ns);
  EXPECT_DOUBLE_EQ(lnc2.hbm_bytes_per_ns, 2 * trn2().hbm_bytes_per_ns);
  EXPECT_DOUBLE_EQ(lnc2.fixed_ns, trn2().fixed_ns);
  const MatmulShape s{1, 4096, 4096, 4096};
  EXPECT_NEAR(matmulNs(s, 2, lnc2), matmulNs(s, 2, trn2()) / 2, 1e-6);
  const TrainiumModel& trn1 = trainiumModel(Target::kTrn1);
  EXPECT_EQ(logicalCoreModel(trn1, 2).tensor_bf16_flops_per_ns,
            trn1.tensor_bf16_flops_per_ns);
  EXPECT_EQ(logicalCoreModel(trn1, 2).physical_cores, 1);
}

TEST(TargetSelection, SetAndRead) {
  const Target before = trainiumModel().target;
  setTrainiumTarget(Target::kTrn1);
  EXPECT_EQ(trainiumModel().target, Target::kTrn1);
  EXPECT_EQ(trainiumModel().name, "trn1");
  setTrainiumTarget(Target::kTrn3);
  EXPECT_EQ(trainiumModel().name, "trn3");
  setTrainiumTarget(before);
}

TEST(Engines, NamesByDtype) {
  EXPECT_STREQ(engineName(0, true, 2), "");
  EXPECT_STREQ(engineName(1, false, 2), "vector");
  EXPECT_STREQ(engineName(1, true, 4), "tensor_fp32");
  EXPECT_STREQ(engineName(1, true, 2), "tensor_bf16");
  EXPECT_STREQ(engineName(1, true, 1), "tensor_fp8");
}

}  // namespace
}  // namespace neuron_rt
