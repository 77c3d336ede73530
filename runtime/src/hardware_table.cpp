#include "neuron_runtime/hardware_table.h"

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

// Sources (AWS Neuron documentation, https://awsdocs-neuron.readthedocs-hosted.com;
// the same text is in github.com/aws-neuron/aws-neuron-sdk):
//  [trn1]      en/latest/general/arch/neuron-hardware/trainium.html
//  [trn1-inst] en/latest/general/arch/neuron-hardware/trn1-arch.html
//              (trn1.32xlarge: 16 chips, EFA 800 Gbps)
//  [trn2]      en/latest/about-neuron/arch/neuron-hardware/trainium2.html
//              (its Trainium-vs-Trainium2 tables give Trainium's
//              interconnect, SBUF and CC cores)
//  [trn2-inst] en/latest/general/arch/neuron-hardware/trn2-arch.html
//              (trn2.48xlarge: 16 chips in a 4x4 2D torus; EFAv3 3.2 Tbps,
//              also https://aws.amazon.com/ec2/instance-types/trn2/)
//  [trn3]      en/latest/about-neuron/arch/neuron-hardware/trainium3.html
//  [trn3-inst] about-neuron/arch/neuron-hardware/trn3-arch.rst (Trn3 Gen1
//              UltraServer: four servers of 16 chips, EFA 12,800 Gbps)
//  [nc-v2]     en/latest/general/arch/neuron-hardware/neuron-core-v2.html
//  [nc-v3]     en/latest/about-neuron/arch/neuron-hardware/neuron-core-v3.html
//              ("158 cFP8 TFLOPS, and 79 BF16/FP16/TF32 TFLOPS")
//  [nc-v4]     en/latest/about-neuron/arch/neuron-hardware/neuron-core-v4.html
//              ("315 MXFP8/MXFP4 TFLOPS")
//  [nki-v2]    en/latest/nki/arch/trainium_inferentia2_arch.html
//              ("Data-path Width and Frequency" table; the 128 x 128 PE
//              array, a moving tile of up to 512 columns)
//  [nki-v3]    en/latest/nki/arch/trainium2_arch.html ("Compute Engine
//              Specifications"; "20 CC-Cores")
//  [nki-v4]    en/latest/nki/about/trainium3_arch.html ("Compute Engine
//              Specifications"; SBUF 32 MiB; "20 CC-Cores")
//  [nki-dma]   en/latest/nki/about/nki-dma-overview.html ("Each NeuronCore
//              (v2-v4) is paired with 16 DMA engines"; "27.2 GB/s for
//              NeuronCore-v2 and -v3 or 38.4 GB/s for NeuronCore-v4")
//  [nki-dma-bw] en/latest/nki/deep-dives/nki-dma-bandwidth-guide.html
//              ("descriptor setup, synchronization, and semaphore-to-start
//              latency (~1300 ns cross-engine)"; "large payloads (>=4 KiB)
//              are required to saturate HBM bandwidth")
//  [nki-dge]   en/latest/nki/deep-dives/nki-dge.html ("each hardware-DGE DMA
//              instruction takes approximately 600 ns")
//  [nccom]     en/latest/tools/neuron-sys-tools/nccom-test.html (measured
//              collectives on trn1.32xlarge; the calibration rows of
//              torch_neuronx/estimate/published_figures.py)
//
// Per-core tensor engine: the estimates use the published per-NeuronCore
// figures, which are what the 128 x 128 PE array does at the Tensor clock
// (v3: 2 x 16384 x 2.4 GHz = 78.6 TFLOPS, published 79; v2: 2 x 16384 x
// 2.8 GHz = 91.8, published 92), not the chip's figure over its cores
// (667/8 = 83.4): the tile-quantised matmul estimate counts PE-array
// cycles, and its peak must be the same array's.
//
// Model figures (no published value), with their reasoning:
//  dma_latency_ns 2000, dma_issue_ns 600: the NKI cost model's DMA costs
//    (docs/nki.md calibrates them on the NKI tutorials); kept as they were.
//  dma_half_payload_bytes 512: a DMA moves its per-partition payload at
//    p / (p + 512) of the engines' peak: 89% at the 4 KiB [nki-dma-bw] says
//    saturates HBM, 50% at 512 B (where the NKI cost model starts treating
//    rows as efficient), 11% at 64 B.
//  launch_ns 700: an eager op's launch on the device (instruction fetch,
//    the semaphores that order it after the previous item). No figure is
//    published for TorchNeuron's eager launch; 700 keeps an eager item's
//    fixed cost (launch + dma_start_ns) at the 2 us the estimates had
//    before the per-transfer DMA model.
//  min_matmul_cycles 64: a matmul instruction takes at least this many
//    Tensor cycles whatever its moving size (the NKI cost model's minimum
//    instruction interval).
//  cc_gb_per_s: a chip's collective throughput (its CC cores driving DMA
//    rings), shared by the group's ranks on it. trn1: 113.4 GB/s, from
//    [nccom]: a 2-rank all-reduce of 1 GiB in 18,930 us is 56.7 GB/s per
//    rank. trn2: x 20/6 CC cores [trn2] = 378. trn3: x 38.4/27.2, its
//    faster DMA engines [nki-dma] = 534.
//  collective_fixed_ns 4000, hop 2000 (chip and NeuronLink steps): from
//    [nccom] trn1 32-rank all-gather of 512 KiB in 23.1 us (9 us of
//    transfer at the rate above, 5 recursive-doubling steps).
//  efa_hop_latency_ns 15000: a step between hosts (an EFA round trip).
//  efa_collective_fixed_ns 470000, _large_ns 1250000 from 64 KiB: a group
//    across hosts. [nccom]'s 64-rank 2-host all-reduce takes 520 us at 8 B
//    (470 us + the model's 50 us of steps: that row is the calibration) and
//    about 1.3 ms flat from 64 KiB to 2 MiB (the page's table: the runtime
//    switches algorithm), far above any per-step figure. No trn2/trn3
//    figure is published; they use trn1's.
constexpr double kDmaLatencyNs = 2000.0;
constexpr double kDmaIssueNs = 600.0;
constexpr double kDmaStartNs = 1300.0;  // [nki-dma-bw]
constexpr double kDmaHalfPayloadBytes = 512.0;
constexpr double kLaunchNs = 700.0;
constexpr double kMinMatmulCycles = 64.0;
constexpr double kCollectiveFixedNs = 4000.0;
constexpr double kHopLatencyNs = 2000.0;
constexpr double kLinkHopLatencyNs = 2000.0;
constexpr double kEfaHopLatencyNs = 15000.0;
constexpr double kEfaCollectiveFixedNs = 470000.0;        // [nccom], see above
constexpr double kEfaCollectiveFixedLargeNs = 1250000.0;  // [nccom]
constexpr double kEfaLargeMessageBytes = 65536.0;         // [nccom]
constexpr double kTrn1CcGbPerS = 113.4;  // [nccom], see above

constexpr HardwareSpec kTable[kTargets] = {
    {
        Target::kTrn1,
        "trn1",
        "Trainium",
        "NeuronCore-v2",
        2,      // [trn1] "Two NeuronCore-v2"
        false,  // LNC begins with Trainium2 [trn2]
        190.0,  // [trn1] 190 FP16/BF16/cFP8/TF32 TFLOPS
        47.5,   // [trn1] 47.5 FP32 TFLOPS
        190.0,  // [trn1] cFP8 at the BF16 rate
        820.0,  // [trn1] "820 GiB/sec" ([nki-v2]: 820 GB/s; [trn2]: 0.8 TB/s)
        384.0,  // [trn2] Trainium inter-chip interconnect, 384 GB/s/chip
        6,      // [trn2] Trainium: 6 CC Cores
        92.0,   // [nki-v2] NeuronCore-v2 BF16 TFLOPS
        23.0,   // [nki-v2] FP32
        92.0,   // cFP8 at the BF16 rate ([trn1])
        24.0,   // [trn2] Trainium SBUF 48 MiB per chip, two cores
        16,     // [nki-dma]
        27.2,   // [nki-dma]
        2.8,    // [nki-v2] Tensor
        1.12,   // [nki-v2] Vector
        1.4,    // [nki-v2] Scalar
        1.4,    // [nki-v2] GpSimd
        "trn1.32xlarge",
        16,     // [trn1-inst]
        800.0,  // [trn1-inst] EFA 800 Gbps
        kDmaStartNs,
        kDmaLatencyNs,
        kDmaIssueNs,
        kDmaHalfPayloadBytes,
        kLaunchNs,
        kMinMatmulCycles,
        kTrn1CcGbPerS,
        kCollectiveFixedNs,
        kHopLatencyNs,
        kLinkHopLatencyNs,
        kEfaHopLatencyNs,
        kEfaCollectiveFixedNs,
        kEfaCollectiveFixedLargeNs,
        kEfaLargeMessageBytes,
    },
    {
        Target::kTrn2,
        "trn2",
        "Trainium2",
        "NeuronCore-v3",
        8,        // [trn2] "eight NeuronCore-v3"
        true,     // [trn2] Logical NeuronCore Configuration
        667.0,    // [trn2] 667 BF16/FP16/TF32 TFLOPS
        181.0,    // [trn2] 181 FP32 TFLOPS
        1299.0,   // [trn2] 1,299 FP8 TFLOPS
        2900.0,   // [trn2] 2.9 TB/sec
        1280.0,   // [trn2] NeuronLink-v3, 1.28 TB/sec per chip
        20,       // [trn2] 20 CC-Cores
        79.0,     // [nc-v3] 79 BF16/FP16/TF32 TFLOPS
        20.0,     // [nki-v3] FP32
        158.0,    // [nc-v3] 158 cFP8 TFLOPS
        28.0,     // [trn2] SBUF 224 MiB per chip; [nc-v3] 28 MB SRAM
        16,       // [nki-dma]
        27.2,     // [nki-dma]
        2.4,      // [nki-v3] Tensor
        0.96,     // [nki-v3] Vector
        1.2,      // [nki-v3] Scalar
        1.2,      // [nki-v3] GpSimd
        "trn2.48xlarge",
        16,       // [trn2-inst] 16 chips, 4x4 2D torus
        3200.0,   // [trn2-inst] EFAv3 3.2 Tbps
        kDmaStartNs,
        kDmaLatencyNs,
        kDmaIssueNs,
        kDmaHalfPayloadBytes,
        kLaunchNs,
        kMinMatmulCycles,
        kTrn1CcGbPerS * 20.0 / 6.0,  // CC cores, see above
        kCollectiveFixedNs,
        kHopLatencyNs,
        kLinkHopLatencyNs,
        kEfaHopLatencyNs,
        kEfaCollectiveFixedNs,
        kEfaCollectiveFixedLargeNs,
        kEfaLargeMessageBytes,
    },
    {
        Target::kTrn3,
        "trn3",
        "Trainium3",
        "NeuronCore-v4",
        8,        // [trn3] "eight NeuronCore-v4 cores"
        true,     // [trn3] Logical NeuronCore Configuration
        671.0,    // [trn3] 671 BF16/FP16/TF32 TFLOPS
        183.0,    // [trn3] 183 FP32 TFLOPS
        2517.0,   // [trn3] 2,517 MXFP8/MXFP4 TFLOPS
        4900.0,   // [trn3] 4.9 TB/sec ([nki-v4] says 4.7 TB/s)
        2560.0,   // [trn3] NeuronLink-v4, 2.56 TB/sec per device
        20,       // [nki-v4] 20 CC-Cores
        79.0,     // [nc-v4] BF16
        20.0,     // [nc-v4] FP32
        315.0,    // [nc-v4] 315 MXFP8/MXFP4 TFLOPS
        32.0,     // [nki-v4] SBUF 32 MiB
        16,       // [nki-dma]
        38.4,     // [nki-dma]
        2.4,      // [nki-v4] Tensor
        1.2,      // [nki-v4] Vector
        1.2,      // [nki-v4] Scalar
        1.2,      // [nki-v4] GpSimd
        "Trn3 Gen1 UltraServer server",
        16,       // [trn3-inst] 16 chips per server
        3200.0,   // [trn3-inst] 12,800 Gbps over its four servers
        kDmaStartNs,
        kDmaLatencyNs,
        kDmaIssueNs,
        kDmaHalfPayloadBytes,
        kLaunchNs,
        kMinMatmulCycles,
        kTrn1CcGbPerS * 20.0 / 6.0 * 38.4 / 27.2,  // see above
        kCollectiveFixedNs,
        kHopLatencyNs,
        kLinkHopLatencyNs,
        kEfaHopLatencyNs,
        kEfaCollectiveFixedNs,
        kEfaCollectiveFixedLargeNs,
        kEfaLargeMessageBytes,
    },
};

constexpr bool inTargetOrder() {
  for (int k = 0; k < kTargets; ++k)
    if (static_cast<int>(kTable[k].target) != k) return false;
  return true;
}
static_assert(inTargetOrder(), "kTable follows Target's order");

}  // namespace

const HardwareSpec& hardwareSpec(Target target) {
  return kTable[static_cast<int>(target)];
}

std::string targetNames() {
  std::string out;
  for (const HardwareSpec& s : kTable) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

Target parseTarget(const std::string& name) {
  for (const HardwareSpec& s : kTable)
    if (name == s.name) return s.target;
  throw Error(Status::kInvalidArgument,
              "unknown target '" + name + "' (valid: " + targetNames() + ")");
}

}  // namespace neuron_rt
