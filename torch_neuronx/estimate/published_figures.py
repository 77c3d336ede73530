"""Published Trainium figures whose workload can be reproduced here: the data
of the validation table (torch_neuronx.estimate.validation computes our
estimate of each).

Every row names its source (a page of the vendor's documentation or of its
repositories) and quotes the sentence or the table cell the figure comes
from. ``published`` is a time in ``unit`` ("us", "ms" or "s"): a throughput
is turned into the time of the unit of work it counts (the quote keeps the
original figure), so that every ratio reads the same way: ours / published
> 1 means we estimate slower than measured.

``spec`` says what to estimate: ``kind`` "nki" (a kernel of
validation_kernels.py traced on the published shapes, the NKI cost model),
"collective" (the collective cost model on the published topology) or
"model" (a planning run of a model's step). ``note`` says what the workload
has that our estimate does not see (why a ratio may be off), or how the row
was reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_NKI_MATMUL = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/2086a70af5c17f5d11e407e9c1df0afb8fb5965c/"
    "general/nki/tutorials/matrix_multiplication.rst"
)
_NKI_MAMBA = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/4373facfdc7a61e7c3a9b115c623996ccbe5a7bd/"
    "nki/guides/tutorials/fused_mamba.rst"
)
_RMSNORM_QUANT = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/337e6041dbe2d9f4c29aabdcb10cd305eb234c47/"
    "nki/library/specs/"
    "design-rmsnorm-quant.rst"
)
_NCCOM = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/nccom-test.html"
)
_TRN1_TRAINING = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/7c165a3e01131a86537f6e0b3ba43716e44d8bc4/"
    "about-neuron/benchmarks/trn1/"
    "training_data_decoder.csv"
)
_TRN1_TRAINING_ENC = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/337e6041dbe2d9f4c29aabdcb10cd305eb234c47/"
    "about-neuron/benchmarks/trn1/"
    "training_data_encoder.csv"
)
_TRN1_LATENCY = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/7c165a3e01131a86537f6e0b3ba43716e44d8bc4/"
    "about-neuron/benchmarks/trn1/"
    "latency_data_decoder.csv"
)
_TRN2_LLAMA70B = (
    "https://github.com/aws-neuron/aws-neuron-sdk/blob/06f3378416cfebaf4413eaa0a95002398ccc6041/"
    "libraries/nxd-inference/"
    "tutorials/llama70b_perf_comparison.csv"
)


@dataclass(frozen=True)
class Figure:
    name: str  # row id (the first column of the docs table)
    workload: str  # exact shapes, dtypes, configuration, layout
    target: str  # trn1 / trn2 / trn3
    lnc: int  # logical NeuronCore size the figure was measured with (1 on trn1)
    published: float  # in `unit`
    unit: str  # "us", "ms", "s"
    source: str  # URL
    quote: str  # the sentence or table cell, as published
    spec: dict = field(default_factory=dict)
    note: str = ""


def _mm(name, label, row, ms, hfu, note=""):
    return Figure(
        name=f"nki-matmul-{name}",
        workload=(
            f"NKI matmul tutorial, {label} kernel: [4096, 8192] x [8192, 8192] bf16 "
            "(lhsT 8192 x 4096), one NeuronCore"
        ),
        target="trn1",
        lnc=1,
        published=ms,
        unit="ms",
        source=_NKI_MATMUL,
        quote=(
            f'| {row} | {ms:.2f} | {hfu} | (Latency (ms), HFU %); "server instance (Trn1.32xlarge)"'
        ),
        spec={
            "kind": "nki",
            "kernel": f"matmul:{name}",
            "args": [([8192, 4096], "bfloat16"), ([8192, 8192], "bfloat16")],
        },
        note=note,
    )


def _mamba(version, channels, seq, value, unit, quote, note=""):
    return Figure(
        name=f"nki-mamba-{version}-c{channels}-s{seq}",
        workload=(
            f"NKI fused Mamba tutorial, mamba_{version}: batch 1, channels {channels}, "
            f"seq_len {seq}, state_size 16, fp32, one NeuronCore"
        ),
        target="trn1",
        lnc=1,
        published=value,
        unit=unit,
        source=_NKI_MAMBA,
        quote=quote,
        spec={
            "kind": "nki",
            "kernel": f"mamba:{version}",
            "args": [
                ([1, channels, seq], "float32"),
                ([1, channels, seq], "float32"),
                ([channels, 16], "float32"),
                ([1, 16, seq], "float32"),
                ([1, 16, seq], "float32"),
            ],
        },
        note=note
        or (
            "The tutorial names no instance; its NKI release (2024) ran on Trn1/Inf2, "
            "so NeuronCore-v2 is assumed."
        ),
    )


def _rmsq(model, seq_label, rows, hidden, us):
    return Figure(
        name=f"nkilib-rmsnorm-quant-{seq_label}x{hidden}",
        workload=(
            f"NKI library RMSNorm-Quant ({model}): [1, {seq_label}, {hidden}] bf16 -> fp8 "
            "+ fp32 row scales, LNC=2 (rows split over the 2 physical cores: "
            f"{rows // 2} rows per core estimated)"
        ),
        target="trn2",
        lnc=2,
        published=us,
        unit="us",
        source=_RMSNORM_QUANT,
        quote=(
            f"Performance Targets, {model}: Target Latency (us) {us} | Batch 1 | "
            f"{seq_label} | {hidden}"
        ),
        spec={
            "kind": "nki",
            "kernel": "rmsnorm_quant",
            "args": [([rows // 2, hidden], "bfloat16"), ([1, hidden], "bfloat16")],
        },
        note=(
            "A target latency, not a measurement. Reproduced with this repository's kernel "
            "in the library's design (validation_kernels.rmsnorm_quant), one LNC=2 shard "
            "per physical core."
        ),
    )


def _nccom(name, kind, nbytes, ranks, us, quote, nodes=1, dtype="fp32", note=""):
    return Figure(
        name=name,
        workload=(
            f"nccom-test {kind}, {ranks} ranks"
            + (f" on {nodes} trn1.32xlarge" if nodes > 1 else " on one trn1.32xlarge")
            + f", {nbytes:,} B {dtype}"
        ),
        target="trn1",
        lnc=1,
        published=us,
        unit="us",
        source=_NCCOM,
        quote=quote,
        spec={
            "kind": "collective",
            "op": kind,
            "bytes": nbytes,
            "ranks": ranks,
            "ranks_per_chip": 2,
            "chips_per_host": 16,
        },
        note=(
            note + " The guide's examples (P50 time(us)) name no instance; 32 ranks per node "
            "means trn1.32xlarge (16 chips x 2 NeuronCore-v2)."
        ).strip(),
    )


FIGURES: list[Figure] = [
    # --- NKI tutorial kernels -------------------------------------------
    _mm(
        "tiled",
        "tiled",
        "Original Tiled",
        51.80,
        10.98,
        "DMA-bound: two loads (32 KiB and 128 KiB) per matmul; the time turns on the DMA "
        "efficiency of those transfers.",
    ),
    _mm(
        "hoist_load",
        "hoisted loads",
        "Optimization 1",
        42.96,
        13.24,
        "DMA-bound: rhs reloaded for every m tile.",
    ),
    _mm(
        "block_free_dimension",
        "blocked free dimension",
        "Optimization 2",
        22.07,
        26.51,
        "DMA-bound: 1 KiB rows (512 bf16) per partition from the row-major rhs; the "
        "efficiency of such strided loads (the DMA bandwidth guide) sets the time.",
    ),
    _mm(
        "fully_optimized",
        "fully optimized",
        "Optimization 3",
        6.97,
        85.24,
        "Tensor-engine-bound on the hardware (85% HFU).",
    ),
    _mamba(
        "v1",
        256,
        512,
        172.93,
        "us",
        "This NKI kernel implementation now takes 172.93 usec (batch=1, seq_len=512, "
        "channels=256, state_size=16)",
    ),
    _mamba(
        "v1",
        4096,
        512,
        2.34,
        "ms",
        "The new device execution time with increased channels is now 2.34 ms "
        "(channels 256 -> 4096)",
    ),
    _mamba(
        "v2",
        4096,
        512,
        1.61,
        "ms",
        "The device execution time is now 1.61 ms, which is a 31% reduction in latency "
        "(mamba_v2, loop reordering)",
        note=(
            "Vector-engine-bound (VectorE 99.63% active on the hardware): the time is the Vector "
            "engine's cost of fp32 tensor_tensor and tensor_tensor_scan over [128, 512] tiles. "
            "NeuronCore-v2 assumed, as for v1."
        ),
    ),
    _mamba(
        "v3",
        4096,
        2048,
        6.6,
        "ms",
        "scaling table, seq_len 2048: mamba_v3 Measured Latency (ms) 6.6",
        note=(
            "Vector-engine-bound, like v2 (VectorE 94.85% active at seq_len 8192). "
            "NeuronCore-v2 assumed, as for v1."
        ),
    ),
    _mamba(
        "v3",
        4096,
        8192,
        27.8,
        "ms",
        "With the above profile, the kernel now takes 27.8 ms (mamba_v3, seq_len 8192)",
    ),
    # --- NKI library kernel (trn2, LNC=2) --------------------------------
    _rmsq("Llama3.3 70B", "2K", 2048, 8192, 458.2),
    _rmsq("Llama3.3 70B", "32K", 32768, 8192, 6287.0),
    _rmsq("Llama3.1 405B", "2K", 2048, 16384, 866.81),
    _rmsq("Llama3.1 405B", "32K", 32768, 16384, 13214.40),
    # --- collectives (nccom-test, trn1) ----------------------------------
    _nccom(
        "nccom-allr-2r-32MiB-u8",
        "allreduce",
        33554432,
        2,
        768,
        "nccom-test -r 2 allr: 33554432 | 33554432 | uint8 | 768 | 40.69 | 40.69",
        dtype="uint8",
        note="Bandwidth-bound: busbw 40.7 GiB/s between the two cores of one chip.",
    ),
    _nccom(
        "nccom-allr-2r-1KiB",
        "allreduce",
        1024,
        2,
        58,
        "nccom-test -r 2 ... allr: 1024 | 256 | fp32 | 58 | 0.02 | 0.02",
        note=(
            "Latency-bound: 58 us is one collective's fixed cost (the page's times are flat "
            "at 58-60 us from 1 KiB to 256 KiB). Not adopted: 64 TP all-reduces at 58 us "
            "would exceed trn1-llama2-7b-tpot's whole token; the page's newer runs "
            "(nccom-allg-32r-512KiB, 6.2 us at 1 KiB) show a few us (docs/profiling.md)."
        ),
    ),
    _nccom(
        "nccom-allr-2r-64MiB",
        "allreduce",
        67108864,
        2,
        1214,
        "nccom-test -r 2 ... allr: 67108864 | 16777216 | fp32 | 1214 | 51.48 | 51.48",
        note="Bandwidth-bound: busbw 51.5 GiB/s within one chip.",
    ),
    _nccom(
        "nccom-allr-2r-1GiB",
        "allreduce",
        1073741824,
        2,
        18930,
        "nccom-test -r 2 ... allr: 1073741824 | 268435456 | fp32 | 18930 | 52.83 | 52.83",
        note="Bandwidth-bound: busbw 52.8 GiB/s within one chip.",
    ),
    _nccom(
        "nccom-allg-32r-512KiB",
        "allgather",
        524288,
        32,
        23.11,
        "nccom-test -r 32 ... allg --report-to-json-file: 524288 | 131072 | fp32 | 23.11 "
        "(time:avg(us))",
        note=(
            "size(B) is the gathered output (16,384 B per rank, --show-input-output-size); "
            "6.2 us at 1 KiB in the same run, so the fixed cost is a few us, not 31 ring "
            "steps. An older run of the same command on the page reads 179 us."
        ),
    ),
    _nccom(
        "nccom-allr-64r-2n-8B",
        "allreduce",
        8,
        64,
        520,
        "nccom-test -r 64 -N 2 ... allr: 8 | 2 | fp32 | 520",
        nodes=2,
        note=(
            "Latency-bound: the fixed cost of an all-reduce over two instances (520 us at 8 B, "
            "about 1.3 ms from 64 KiB to 2 MiB). Calibration: the model's fixed cost for a "
            "group across hosts comes from this row and that plateau."
        ),
    ),
    _nccom(
        "nccom-allr-64r-2n-64MiB",
        "allreduce",
        67108864,
        64,
        3963,
        "nccom-test -r 64 -N 2 ... allr: 67108864 | 16777216 | fp32 | 3963 | 15.77 | 31.05",
        nodes=2,
        note="busbw 31.1 GiB/s across two instances (EFA between the hosts).",
    ),
    _nccom(
        "nccom-allr-64r-2n-1GiB",
        "allreduce",
        1073741824,
        64,
        41806,
        "nccom-test -r 64 -N 2 ... allr: 1073741824 | 268435456 | fp32 | 41806 | 23.92 | 47.09",
        nodes=2,
        note="busbw 47.1 GiB/s across two instances (EFA between the hosts).",
    ),
    # --- whole models (planning runs) -----------------------------------
    Figure(
        name="trn1-llama3.1-8b-pretrain",
        workload=(
            "Llama-3.1-8B pre-training, NxD, 32 trn1.32xlarge (1024 NeuronCores), TP=32 DP=32 "
            "ZeRO-1, microbatch 1, global batch 1024, seq 8192, BF16 autocast + fp32 AdamW: "
            "one optimizer step (1024 sequences)"
        ),
        target="trn1",
        lnc=1,
        published=1024 / 47.95,
        unit="s",
        source=_TRN1_TRAINING,
        quote=(
            "Llama-3.1-8B pre-training,trn1.32xlarge/trn1n.32xlarge,Autocast:BF16+FP32Optimizer,"
            "32,TP=32 DP=32 PP=1 ZeRO-1,1,1024,AdamW,8192,47.95 [seq/sec]"
        ),
        spec={
            "kind": "model",
            "model": "llama3.1-8b",
            "mode": "train",
            "seq": 8192,
            "microbatch": 1,
            "grad_accum": 32,
            "tp": 32,
            "kv_heads": 32,
            "dp": 32,
            "sequence_parallel": True,
        },
        note=(
            "1024 sequences / 47.95 seq/s = 21.4 s per step = 32 microbatches of one sequence "
            "per DP rank. Planned: the 8 KV heads replicated to TP=32 as NxD does; the 32 DP "
            "ranks laid out as FSDP (the plan's data parallelism), where NxD used ZeRO-1; "
            "sequence parallelism on, as NxD's Llama-3.1-8B TP + ZeRO-1 recipe runs it "
            "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/"
            "neuronx-distributed/tutorials/training_llama_tp_zero1.html: 'Tensor Parallelism, "
            "Sequence Parallel, Selective checkpointing, ZeRO-1'; the plan has no selective "
            "checkpointing, so it recomputes nothing). The published run is an XLA-compiled "
            "graph (elementwise ops fused, collectives overlapped with compute); the plan "
            "costs the eager op stream: each elementwise op an HBM round trip, and the "
            "tensor-parallel all-gathers and reduce-scatters exposed."
        ),
    ),
    Figure(
        name="trn1-bert-large-ph1",
        workload=(
            "HF BERT-Large phase-1 pre-training, one trn1.32xlarge, 32 NeuronCores data-parallel, "
            "BF16 autocast, microbatch 16 per core, seq 128: one microbatch step of all 32 ranks "
            "(512 sequences)"
        ),
        target="trn1",
        lnc=1,
        published=512 / 3836.4653,
        unit="s",
        source=_TRN1_TRAINING_ENC,
        quote=(
            "HuggingFace BERT-Large Ph1 pre-training,trn1.32xlarge/trn1n.32xlarge,Autocast:BF16+SR,"
            "1,[32xNC(DP)],16,16384,AdamW,128,3836.4653 [seq/sec]"
        ),
        spec={
            "kind": "model",
            "model": "bert-large",
            "mode": "train",
            "seq": 128,
            "microbatch": 16,
            "dp": 32,
            "grad_accum": 32,
            "per": "microbatch",
        },
        note=(
            "512 sequences / 3836.5 seq/s = 133 ms per microbatch step; global batch 16384 = "
            "32 accumulated microbatches, the optimizer step shared by them. Planned data "
            "parallelism is FSDP over the 32 ranks (the published run is plain DP)."
        ),
    ),
    Figure(
        name="trn1-llama2-7b-tpot",
        workload=(
            "Llama-2-7b text generation, Transformers NeuronX, one trn1.32xlarge, TP=32, batch 1, "
            "bf16, input 128 / output 8064 tokens (sequence 8192): time per output token"
        ),
        target="trn1",
        lnc=1,
        published=6.69956207,
        unit="ms",
        source=_TRN1_LATENCY,
        quote=(
            "Llama-2-7b,...,Transformers NeuronX,trn1.32xlarge,Text Generation,161.7081305,"
            "13.32402229,14.1210556,6.69956207 [TPOT P50 ms],...,32,1,8192,128,8064,FP16,"
            "Matmult-BF16,bf16"
        ),
        spec={
            "kind": "model",
            "model": "llama2-7b",
            "mode": "decode",
            "prompt": 4096,
            "batch": 1,
            "tp": 32,
        },
        note=(
            "Decode step after a 4,096-token context, the middle of the run (128 + 8064 / 2). "
            "The published stack runs a compiled decode graph with fused kernels; the plan "
            "costs the eager op stream (norms, rotary, residuals as separate items)."
        ),
    ),
    Figure(
        name="trn1-llama2-70b-tpot",
        workload=(
            "Llama-2-70b text generation, Transformers NeuronX, one trn1.32xlarge, TP=32, "
            "batch 1, bf16, input 128 / output 128 tokens (sequence 256): time per output token"
        ),
        target="trn1",
        lnc=1,
        published=25.18129,
        unit="ms",
        source=_TRN1_LATENCY,
        quote=(
            "Llama-2-70b,...,Transformers NeuronX,trn1.32xlarge,Text Generation,39.28574,"
            "53.91026,54.9469,25.18129 [TPOT P50 ms],...,32,1,256,128,128,FP16,Matmult-BF16,bf16"
        ),
        spec={
            "kind": "model",
            "model": "llama2-70b",
            "mode": "decode",
            "prompt": 128,
            "batch": 1,
            "tp": 32,
            "kv_heads": 32,
        },
        note=(
            "Decode step after the 128-token prompt (the run's contexts are 128-256). "
            "8 KV heads replicated to TP=32 as transformers-neuronx does."
        ),
    ),
    Figure(
        name="trn1-llama2-70b-ttft",
        workload=(
            "Llama-2-70b text generation, Transformers NeuronX, one trn1.32xlarge, TP=32, "
            "batch 1, bf16, 128-token prompt: time to first token"
        ),
        target="trn1",
        lnc=1,
        published=53.91026,
        unit="ms",
        source=_TRN1_LATENCY,
        quote=(
            "Llama-2-70b,...,Transformers NeuronX,trn1.32xlarge,Text Generation,39.28574,"
            "53.91026 [TTFT P50 ms],54.9469,25.18129,...,32,1,256,128,128,FP16,Matmult-BF16,bf16"
        ),
        spec={
            "kind": "model",
            "model": "llama2-70b",
            "mode": "prefill",
            "prompt": 128,
            "batch": 1,
            "tp": 32,
            "kv_heads": 32,
        },
        note="The prefill of the 128-token prompt (the same planned run as the TPOT row).",
    ),
    Figure(
        name="trn2-llama3.3-70b-tpot",
        workload=(
            "Llama-3.3-70B-Instruct, NxD Inference + vLLM, one trn2.48xlarge, TP=64 at LNC=2, "
            "batch 1, bf16, no speculative decoding, LLMPerf 10,000 input / 1,500 output "
            "tokens: time per output token"
        ),
        target="trn2",
        lnc=2,
        published=19.8,
        unit="ms",
        source=_TRN2_LLAMA70B,
        quote="No speculative decoding,575.6 [TTFT P50 ms],19.8 [TPOT P50 ms],47",
        spec={
            "kind": "model",
            "model": "llama3.3-70b",
            "mode": "decode",
            "prompt": 10000,
            "batch": 1,
            "tp": 64,
            "kv_heads": 64,
            "sequence_parallel": True,
        },
        note=(
            "Decode step after the 10,000-token prompt (the run's contexts are 10,000-11,500). "
            "8 KV heads replicated to TP=64 as NxD Inference does; the run shares the TTFT "
            "row's plan (sequence parallelism in the prefill only)."
        ),
    ),
    Figure(
        name="trn2-llama3.3-70b-ttft",
        workload=(
            "Llama-3.3-70B-Instruct, NxD Inference + vLLM, one trn2.48xlarge, TP=64 at LNC=2, "
            "batch 1, bf16, 10,000-token prompt: time to first token (the prefill)"
        ),
        target="trn2",
        lnc=2,
        published=575.6,
        unit="ms",
        source=_TRN2_LLAMA70B,
        quote="No speculative decoding,575.6 [TTFT P50 ms],19.8 [TPOT P50 ms],47",
        spec={
            "kind": "model",
            "model": "llama3.3-70b",
            "mode": "prefill",
            "prompt": 10000,
            "batch": 1,
            "tp": 64,
            "kv_heads": 64,
            "sequence_parallel": True,
        },
        note=(
            "TTFT includes the serving path (vLLM, request handling). Planned with sequence "
            "parallelism in the prefill as the tutorial compiles it (--sequence-parallel-enabled); "
            "the published model also runs the NKI QKV/attention/MLP kernels "
            "(--*-kernel-enabled) in one compiled graph, where the plan costs the eager op "
            "stream."
        ),
    ),
]


def by_name() -> dict[str, Figure]:
    return {f.name: f for f in FIGURES}
