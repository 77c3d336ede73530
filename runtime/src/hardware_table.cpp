#include "neuron_runtime/hardware_table.h"

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

// Sources (AWS Neuron documentation, awsdocs-neuron.readthedocs-hosted.com;
// the same text is in github.com/aws-neuron/aws-neuron-sdk):
//  [trn1]      en/latest/general/arch/neuron-hardware/trainium.html
//  [trn2]      en/latest/about-neuron/arch/neuron-hardware/trainium2.html
//              (its Trainium-vs-Trainium2 tables give Trainium's interconnect)
//  [trn3]      en/latest/about-neuron/arch/neuron-hardware/trainium3.html
//  [nki-v2]    en/latest/nki/arch/trainium_inferentia2_arch.html
//              ("Data-path Width and Frequency" table)
//  [nki-v3]    en/latest/nki/arch/trainium2_arch.html ("Compute Engine
//              Specifications")
//  [nki-v4]    en/latest/nki/about/trainium3_arch.html ("Compute Engine
//              Specifications")
//  [nki-dge]   en/latest/nki/deep-dives/nki-dge.html ("each hardware-DGE DMA
//              instruction takes approximately 600 ns")
//
// Model figures, the same for every generation: a DMA's fixed latency and a
// collective's per-step latency of 2 us (no published figure: the NKI DMA
// guide only says a transfer has a size-independent fixed cost, and its
// profile of one 32 KiB transfer on one engine shows 1.4 us); descriptor
// generation of 600 ns per DMA, which [nki-dge] documents for NeuronCore-v3
// hardware DGE (NeuronCore-v2 has none; there it stands for its descriptor
// cost and matches the NKI tutorials' Trainium1 latencies within 2x, see
// docs/nki.md).
//
// The estimates take a core's tensor engine as its chip's figure over its
// cores. The same documentation also publishes per-core figures, lower:
// NeuronCore-v2 92 BF16 / 23 FP32 TFLOPS ([nki-v2]; 190/2 = 95, 47.5/2 =
// 23.75), NeuronCore-v3 79 / 20 ([nki-v3]; 667/8 = 83.4, 181/8 = 22.6),
// NeuronCore-v4 79 / 20 (neuron-core-v4.html; 671/8 = 83.9, 183/8 = 22.9).
// The per-core ones are what 128 x 128 multiply-adds per cycle at the Tensor
// clock give (v3: 2 x 16384 x 2.4 GHz = 78.6 TFLOPS); which to use is for
// issue 32's calibration to decide.
constexpr double kDmaLatencyNs = 2000.0;
constexpr double kDmaIssueNs = 600.0;
constexpr double kHopLatencyNs = 2000.0;

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
        820.0,  // [trn1] "820 GiB/sec" ([nki-v2]: 820 GB/s; [trn2]: 0.8 TB/s)
        384.0,  // [trn2] Trainium inter-chip interconnect, 384 GB/s/chip
        2.8,    // [nki-v2] Tensor
        1.12,   // [nki-v2] Vector
        1.4,    // [nki-v2] Scalar
        1.4,    // [nki-v2] GpSimd
        kDmaLatencyNs,
        kDmaIssueNs,
        kHopLatencyNs,
    },
    {
        Target::kTrn2,
        "trn2",
        "Trainium2",
        "NeuronCore-v3",
        8,       // [trn2] "eight NeuronCore-v3"
        true,    // [trn2] Logical NeuronCore Configuration
        667.0,   // [trn2] 667 BF16/FP16/TF32 TFLOPS
        181.0,   // [trn2] 181 FP32 TFLOPS
        2900.0,  // [trn2] 2.9 TB/sec
        1280.0,  // [trn2] NeuronLink-v3, 1.28 TB/sec per chip
        2.4,     // [nki-v3] Tensor
        0.96,    // [nki-v3] Vector
        1.2,     // [nki-v3] Scalar
        1.2,     // [nki-v3] GpSimd
        kDmaLatencyNs,
        kDmaIssueNs,
        kHopLatencyNs,
    },
    {
        Target::kTrn3,
        "trn3",
        "Trainium3",
        "NeuronCore-v4",
        8,       // [trn3] "eight NeuronCore-v4 cores"
        true,    // [trn3] Logical NeuronCore Configuration
        671.0,   // [trn3] 671 BF16/FP16/TF32 TFLOPS
        183.0,   // [trn3] 183 FP32 TFLOPS
        4900.0,  // [trn3] 4.9 TB/sec ([nki-v4] says 4.7 TB/s)
        2560.0,  // [trn3] NeuronLink-v4, 2.56 TB/sec per device
        2.4,     // [nki-v4] Tensor
        1.2,     // [nki-v4] Vector
        1.2,     // [nki-v4] Scalar
        1.2,     // [nki-v4] GpSimd
        kDmaLatencyNs,
        kDmaIssueNs,
        kHopLatencyNs,
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
