"""Planning mode (torch_neuronx.estimate): a step run with fake tensors must
produce the device items a real eager run produces, with the same estimate; the
Qwen3-8B TP4 x FSDP8 layout must be planned within the time budget with a
report that makes sense; bad input is refused with a ValueError."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
from torch_neuronx import estimate
from torch_neuronx.estimate import models
from torch_neuronx.estimate.__main__ import main as cli_main
from torch_neuronx.profiling import tables

TINY_QWEN3 = {
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
}


def _profiled_items(step):
    """The top-level device items of one profiled call of ``step``: name ->
    (count, summed estimate ns)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
        torch.neuron.synchronize()
    df = tables.device_items(prof)
    df = df[df.parent < 0]
    out = {}
    for name, g in df.groupby("name"):
        out[name] = (len(g), float(g.estimate_ns.sum()))
    return out


def _profile_target():
    t = torch_neuronx._C._profiler_target()
    return t["name"], int(t["physical_cores_per_device"])


def _compare(real: dict, report) -> None:
    planned = {k: (v["count"], v["s"] * 1e9) for k, v in report.items.items()}
    # Same items: every name, every count.
    assert {k: c for k, (c, _) in planned.items()} == {k: c for k, (c, _) in real.items()}
    # Same estimate: in total within 1%, and per name within 1% (a few ns
    # of slack for one-item names).
    real_total = sum(ns for _, ns in real.values())
    assert math.isclose(report.serial_s * 1e9, real_total, rel_tol=0.01), (
        report.serial_s * 1e9,
        real_total,
    )
    for name, (_, ns) in real.items():
        assert math.isclose(planned[name][1], ns, rel_tol=0.01, abs_tol=5), name


def test_fake_step_matches_real_profile_hf_qwen3():
    """A Hugging Face Qwen3 (tiny config) training step: the real run's profile and
    the planning run give the same items and estimate."""
    B, S = 2, 32
    torch.manual_seed(0)
    cfg = models.hf_config(TINY_QWEN3)
    m = models.build_hf_causal_lm(cfg, torch.float32).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (B, S)).to("neuron")

    def step():
        m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer's state: the profiled step is a steady one
    torch.neuron.synchronize()
    real = _profiled_items(step)
    target, lnc = _profile_target()
    r = estimate.estimate_training(
        TINY_QWEN3, target=target, lnc=lnc, seq_len=S, batch=B, dtype="fp32"
    )
    assert "aten::mm" in real and "aten::_scaled_dot_product_flash_attention_for_cpu" in real
    _compare(real, r)


class _Block(torch.nn.Module):
    def __init__(self, d=64, h=4):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)
        self.h = h

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, -1)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class _GPT(torch.nn.Module):
    def __init__(self, V=128, d=64):
        super().__init__()
        self.emb = torch.nn.Embedding(V, d)
        self.blocks = torch.nn.ModuleList([_Block(d) for _ in range(2)])
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, V, bias=False)

    def forward(self, idx, tgt=None):  # tgt: the loss's (inputs feed both)
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def _gpt_loss(logits, idx, tgt):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())


def test_fake_step_matches_real_profile_custom_gpt():
    """A module given as a callable (the example GPT's shape: LayerNorm, GELU, fused
    attention, AdamW's foreach path, the autograd engine's in-place gradient
    sums)."""
    B, T = 2, 16
    torch.manual_seed(0)
    m = _GPT().to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    idx = torch.randint(0, 128, (B, T)).to("neuron")
    tgt = torch.randint(0, 128, (B, T)).to("neuron")

    def step():
        _gpt_loss(m(idx), idx, tgt).backward()
        opt.step()
        opt.zero_grad()

    step()
    torch.neuron.synchronize()
    real = _profiled_items(step)
    target, lnc = _profile_target()

    def inputs():
        return torch.randint(0, 128, (B, T)), torch.randint(0, 128, (B, T))

    r = estimate.estimate_training(
        _GPT,
        inputs=inputs,
        loss=lambda out, i, t: _gpt_loss(out, i, t),
        target=target,
        lnc=lnc,
        dtype="fp32",
    )
    assert real["aten::add_.Tensor"][0] > 0
    _compare(real, r)


def _rank_worker(
    cfg_json: str, tp: int, fsdp: int, seq: int, batch: int, sp: int, out: str
) -> None:
    """One rank of a real job (run by test_fake_layout_matches_real_job): the
    planner's own layout code (TP plan, sequence parallel if ``sp``, FSDP2)
    over the neuron process group, a steady training step profiled, rank 0's
    top-level items written to ``out`` — with the first step's loss and that of
    the same model unsharded on rank 0 (same seed, same batch)."""
    from datetime import timedelta

    import torch.distributed as dist

    from torch_neuronx.estimate import layout as lay

    rank = int(os.environ["RANK"])
    torch.neuron.set_device(rank)
    dist.init_process_group("neuron", timeout=timedelta(seconds=120))
    lo = lay.Layout(tp, fsdp, 1)
    _, tp_mesh, shard_mesh = lay.device_mesh(lo)
    cfg = models.hf_config(json.loads(cfg_json))
    torch.manual_seed(0)
    with torch.device("neuron"):
        ref = models.build_hf_causal_lm(cfg, torch.float32)
    torch.manual_seed(0)
    with torch.device("neuron"):
        m = models.build_hf_causal_lm(cfg, torch.float32)
    m = lay.apply(m, models.decoder_layers(m), lo, tp_mesh, shard_mesh, sequence_parallel=bool(sp))
    params = list(m.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=lay.real_foreach(params))
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="neuron")
    with torch.no_grad():
        ref_loss = ref(input_ids=ids, labels=ids, use_cache=False).loss.item()
    del ref

    def step():
        ls = m(input_ids=ids, labels=ids, use_cache=False).loss
        ls.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return ls.detach()

    first_loss = step().item()
    torch.neuron.synchronize()
    dist.barrier()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    items = _profiled_items(step)
    if rank == 0:
        peak = torch.neuron.max_memory_allocated()
        Path(out).write_text(
            json.dumps(
                {
                    "items": items,
                    "base": base,
                    "peak": peak,
                    "loss": first_loss,
                    "ref_loss": ref_loss,
                }
            )
        )
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp_sequence_parallel"])
def test_fake_layout_matches_real_job(tmp_path, sp):
    """TP2 x FSDP2 on 4 ranks (with and without sequence parallelism): rank 0
    of a real neuron job and the planning run issue the same collectives
    (name, count, estimate) and compute items; the total agrees within 1%.
    Event records and waits (no cost) are not planned; the engine's in-place
    gradient sums are recognised heuristically (one transposed gradient sum
    per layer differs: add.Tensor vs add_.Tensor). The sharded model's loss is
    the unsharded model's."""
    from dist_jobs.launch import check_all_ok, run_ranks

    out = tmp_path / "items.json"
    args = (json.dumps(TINY_QWEN3), "2", "2", "32", "2", str(int(sp)), str(out))
    # The ranks import this checkout (as the test process does).
    root = str(Path(torch_neuronx.__file__).parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    results = run_ranks(__file__, 4, timeout=300, args=("worker", *args), env={"PYTHONPATH": path})
    check_all_ok(results)
    got = json.loads(out.read_text())
    real = {k: tuple(v) for k, v in got["items"].items()}
    real = {k: v for k, v in real.items() if k not in ("event_record", "event_wait")}
    target, lnc = _profile_target()
    assert got["loss"] == pytest.approx(got["ref_loss"], rel=1e-5)
    r = estimate.estimate_training(
        TINY_QWEN3,
        target=target,
        lnc=lnc,
        tp=2,
        fsdp=2,
        seq_len=32,
        batch=2,
        dtype="fp32",
        sequence_parallel=sp,
    )
    planned = {k: (v["count"], v["s"] * 1e9) for k, v in r.items.items()}
    for name in ("c10d::allreduce", "c10d::_allgather_base", "c10d::_reduce_scatter_base"):
        assert planned[name][0] == real[name][0], name
        assert planned[name][1] == pytest.approx(real[name][1], rel=1e-6), name
    adds = ("aten::add.Tensor", "aten::add_.Tensor")
    diff = {
        name: (planned.get(name, (0,))[0], real.get(name, (0,))[0])
        for name in set(real) | set(planned)
        if name not in adds and planned.get(name, (0,))[0] != real.get(name, (0,))[0]
    }
    assert not diff, diff
    assert sum(planned[a][0] for a in adds) == sum(real[a][0] for a in adds)
    real_total = sum(ns for _, ns in real.values())
    assert r.serial_s * 1e9 == pytest.approx(real_total, rel=0.01)
    # Rank 0's device memory: held before the step, and the step's peak.
    assert r.hbm_at_start_bytes == pytest.approx(got["base"], rel=0.05)
    assert r.hbm_peak_bytes == pytest.approx(got["peak"], rel=0.05)


def test_memory_peak_matches_real_step():
    """One device: the bytes held before the step and the step's peak, planned,
    against the caching allocator's memory_allocated / max_memory_allocated."""
    cfg_d = {**TINY_QWEN3, "hidden_size": 512, "intermediate_size": 1024, "vocab_size": 4096}
    cfg_d.update(num_attention_heads=8, num_key_value_heads=4, head_dim=64)
    B, S = 2, 256
    torch.manual_seed(0)
    cfg = models.hf_config(cfg_d)
    m = models.build_hf_causal_lm(cfg, torch.float32).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (B, S)).to("neuron")

    def step():
        m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    step()
    torch.neuron.synchronize()
    peak = torch.neuron.max_memory_allocated()
    r = estimate.estimate_training(cfg_d, seq_len=S, batch=B, dtype="fp32")
    assert r.hbm_at_start_bytes == pytest.approx(base, rel=0.01)
    assert r.hbm_peak_bytes == pytest.approx(peak, rel=0.01)
    assert r.hbm_peak_bytes > 1.5 * r.hbm_at_start_bytes


@pytest.fixture(scope="module")
def qwen3_8b_report():
    return estimate.estimate_training(
        "Qwen/Qwen3-8B", target="trn2", lnc=2, tp=4, fsdp=8, dp=1, seq_len=4096, batch=1
    )


def test_qwen3_8b_tp4_fsdp8_report(qwen3_8b_report):
    """The HF guide's layout: Qwen3-8B, TP4 x FSDP8 on 32 trn2 logical cores."""
    r = qwen3_8b_report
    assert r.wall_s < 120, f"planning took {r.wall_s:.0f} s (budget: 2 minutes)"
    assert (r.cores, r.tp, r.fsdp, r.target, r.lnc) == (32, 4, 8, "trn2", 2)
    # Collectives of both dimensions, of the kinds FSDP2 and TP issue.
    assert set(r.per_group) == {"tp", "fsdp"}
    assert r.items["c10d::_allgather_base"]["count"] >= 36  # one per layer and pass, at least
    assert r.items["c10d::_reduce_scatter_base"]["count"] >= 36
    assert r.items["c10d::allreduce"]["count"] >= 36 * 4  # attention and MLP, both passes
    # All 36 decoder layers ran, each with its share.
    layer_rows = [x for x in r.per_layer if ".layers." in x["module"]]
    assert len(layer_rows) == 36
    assert 0 < r.step_s <= r.serial_s
    assert r.compute_s > r.exposed_collective_s > 0
    assert 0 < r.mfu < 1 and 0 < r.hfu < 1
    # What is held before the step: bf16 parameters and AdamW's two bf16
    # moments, the layers' weights sharded 32 ways, embeddings and lm_head 8
    # ways (FSDP; not split by TP).
    cfg = models.hf_config("Qwen/Qwen3-8B")
    h, inter, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    hd, heads, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    layer = h * heads * hd * 2 + 2 * h * kv * hd + 3 * h * inter
    expect = 3 * 2 * (L * layer / 32 + 2 * V * h / 8)
    assert math.isclose(r.hbm_at_start_bytes, expect, rel_tol=0.05)
    # Fits or not, consistently, and said so.
    assert r.hbm_capacity_bytes == 24 << 30
    assert r.hbm_peak_bytes > r.hbm_at_start_bytes
    assert r.fits == (r.hbm_peak_bytes <= r.hbm_capacity_bytes)
    assert r.hbm_margin_bytes == r.hbm_capacity_bytes - r.hbm_peak_bytes
    assert ("fits" if r.fits else "DOES NOT FIT") in str(r)
    d = json.loads(r.to_json())
    assert d["step_s"] == r.step_s and d["hbm_margin_bytes"] == r.hbm_margin_bytes


def test_generate_tp_small():
    r = estimate.estimate_generate(TINY_QWEN3, tp=2, prompt_len=64, new_tokens=4, dtype="fp32")
    assert r.mode == "generate" and r.new_tokens == 4
    assert r.prefill_s > 0 and r.decode_step_s > 0
    assert r.prefill_s + 3 * r.decode_step_s == pytest.approx(r.serial_s, rel=1e-6)
    assert set(r.per_group) == {"tp"}
    assert set(r.per_phase_s) == {"prefill", "decode"}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"target": "trn9"}, "unknown target"),
        ({"target": "trn1", "lnc": 2}, "no logical cores"),
        ({"tp": 3}, "does not divide"),
        ({"tp": 2, "fsdp": 2, "cores": 8}, "does not equal"),
        ({"dtype": "int7"}, "unknown dtype"),
        ({"tp": 0}, "positive integer"),
        ({"seq_len": 0}, "positive"),
        ({"sequence_parallel": True}, "needs tp > 1"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"seq_len": 16, "batch": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        estimate.estimate_training(TINY_QWEN3, **args)


def test_sequence_parallel_items():
    """Sequence parallelism replaces TP's activation all-reduces with
    reduce-scatters and all-gathers: with it the only all-reduces left are the
    norm weights' gradients (two norms per layer and the final norm)."""
    kw = dict(tp=2, fsdp=2, seq_len=32, batch=2, dtype="fp32")
    base = estimate.estimate_training(TINY_QWEN3, **kw)
    sp = estimate.estimate_training(TINY_QWEN3, sequence_parallel=True, **kw)
    n = lambda r, k: r.items.get(k, {"count": 0})["count"]  # noqa: E731
    layers = TINY_QWEN3["num_hidden_layers"]
    assert n(sp, "c10d::allreduce") == 2 * layers + 1
    assert n(base, "c10d::allreduce") > n(sp, "c10d::allreduce")
    # Per layer, forward and backward: an all-gather before each of attention
    # and the MLP, a reduce-scatter after each.
    for k in ("c10d::_allgather_base", "c10d::_reduce_scatter_base"):
        assert n(sp, k) - n(base, k) >= 4 * layers, k
    assert sp.tp == 2 and sp.step_s > 0


def test_sequence_parallel_generate():
    """generate() with sequence parallelism: the prefill's TP collectives are
    all-gathers and reduce-scatters (no all-reduce), the decode steps are those
    without it, and the parameters are counted once."""
    kw = dict(tp=2, prompt_len=64, new_tokens=4, dtype="fp32")
    base = estimate.estimate_generate(TINY_QWEN3, **kw)
    sp = estimate.estimate_generate(TINY_QWEN3, sequence_parallel=True, **kw)
    layers = TINY_QWEN3["num_hidden_layers"]
    assert sp.decode_step_s == base.decode_step_s
    assert sp.items["c10d::allreduce"]["count"] == 2 * layers * 3  # decode only
    assert sp.items["c10d::_reduce_scatter_base"]["count"] == 2 * layers
    # Before attention and the MLP in each layer, and before lm_head.
    assert sp.items["c10d::_allgather_base"]["count"] == 2 * layers + 1
    assert sp.hbm_at_start_bytes == base.hbm_at_start_bytes
    assert sp.hbm_peak_bytes <= base.hbm_peak_bytes


def test_sequence_parallel_shapes():
    """Where each part runs with sequence parallelism (TP2): the norms on S/TP
    rows, q/k/v projections and attention on the full sequence with the rank's
    heads, the row-wise projections' outputs back on S/TP rows, lm_head on the
    gathered sequence."""
    from torch_neuronx.estimate import layout as lay
    from torch_neuronx.estimate.run import _Planner

    tp, B, S = 2, 2, 32
    cfg = models.hf_config(TINY_QWEN3)
    lo = lay.Layout(tp, 1, 1)
    seen = {}

    def hook(name):
        def f(mod, args, out):
            seen[name] = (
                tuple(lay.local(args[0]).shape) if args else None,
                tuple(lay.local(out if isinstance(out, torch.Tensor) else out[0]).shape),
            )

        return f

    with lay.fake_process_group(tp):
        _, tp_mesh, _ = lay.device_mesh(lo)
        # The planner's fake mode and capture (which answers the reads
        # transformers makes of the fake input).
        planner = _Planner("trn2", None, lo, None)
        fake = planner.fake
        with fake, torch.device("neuron"):
            m = models.build_hf_causal_lm(cfg, torch.float32)
        layers = models.decoder_layers(m)
        m = lay.apply(m, layers, lo, tp_mesh, None, sequence_parallel=True)
        at = layers[0].self_attn
        for name, mod in (
            ("input_layernorm", layers[0].input_layernorm),
            ("q_proj", at.q_proj),
            ("o_proj", at.o_proj),
            ("post_attention_layernorm", layers[0].post_attention_layernorm),
            ("down_proj", layers[0].mlp.down_proj),
            ("norm", m.model.norm),
            ("lm_head", m.lm_head),
        ):
            mod.register_forward_hook(hook(name))
        with fake, torch.device("neuron"):
            ids = torch.randint(0, cfg.vocab_size, (B, S))
        cap = planner.capture()
        with fake, cap.tracker, cap, models.transformers_sees_values():
            m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    H, q = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    assert seen["input_layernorm"] == ((B, S // tp, H), (B, S // tp, H))
    assert seen["post_attention_layernorm"][1] == (B, S // tp, H)
    assert seen["norm"][1] == (B, S // tp, H)
    assert seen["q_proj"] == ((B, S, H), (B, S, q // tp))
    assert seen["o_proj"] == ((B, S, q // tp), (B, S // tp, H))
    assert seen["down_proj"][1] == (B, S // tp, H)
    assert seen["lm_head"] == ((B, S, H), (B, S, cfg.vocab_size))


def test_unknown_model_without_network(monkeypatch):
    # Offline, as CI is: the Hub lookup fails at once instead of retrying.
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="no configuration"):
        estimate.estimate_training("no-such-org/no-such-model-xyz", seq_len=16)


def test_cli_json(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_QWEN3))
    rc = cli_main(["--model", str(cfg), "--tp", "2", "--fsdp", "2", "--seq-len", "32", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cores"] == 4 and d["step_s"] > 0 and set(d["per_group"]) == {"tp", "fsdp"}
    assert cli_main(["--model", str(cfg), "--target", "trn9"]) == 2
    assert "unknown target" in capsys.readouterr().err


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _rank_worker(sys.argv[2], *map(int, sys.argv[3:8]), sys.argv[8])
