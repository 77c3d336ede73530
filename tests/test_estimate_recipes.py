"""Planning what TorchTitan runs: its activation checkpointing policies
(estimate/checkpointing.py) and its job files (estimate/torchtitan_recipe.py,
``python -m torch_neuronx.estimate --torchtitan RECIPE.toml``)."""

from __future__ import annotations

import pytest

from torch_neuronx import estimate
from torch_neuronx.estimate import checkpointing, torchtitan_recipe
from torch_neuronx.estimate.__main__ import main as cli_main

TINY = {
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
}
LAYERS = TINY["num_hidden_layers"]
MM_PER_LAYER = 7  # q, k, v, o, gate, up, down


@pytest.fixture(scope="module")
def plans():
    kw = dict(seq_len=1024, batch=2, dtype="fp32")
    return {
        p: estimate.estimate_training(TINY, activation_checkpointing=p, **kw)
        for p in ("none", "full", "op", 2)
    }


def _count(r, name):
    return r.items.get(name, {"count": 0})["count"]


def test_recomputed_items_follow_the_policy(plans):
    """Backward replays what each policy recomputes, no more: full recomputes a
    layer up to its last needed value (the down projection's output is not
    needed: torch's early stop), op-SAC every second matmul (and no attention),
    a layer frequency of 2 every second layer whole."""
    mm = {p: _count(r, "aten::mm") for p, r in plans.items()}
    assert mm["none"] == 3 * (LAYERS * MM_PER_LAYER + 1)  # forward + 2 in backward
    assert mm["full"] - mm["none"] == LAYERS * (MM_PER_LAYER - 1)
    assert mm["op"] - mm["none"] == LAYERS * (MM_PER_LAYER // 2)
    assert mm[2] - mm["none"] == (LAYERS // 2) * (MM_PER_LAYER - 1)
    attn = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert _count(plans["op"], attn) == _count(plans["none"], attn) == LAYERS
    assert _count(plans["full"], attn) == 2 * LAYERS
    assert _count(plans[2], attn) == LAYERS + LAYERS // 2


def test_saved_activations_shrink_with_recompute(plans):
    peak = {p: r.hbm_peak_bytes for p, r in plans.items()}
    assert peak["full"] < peak["op"] < peak[2] < peak["none"]
    # Recompute costs time: more items, a longer serial sum.
    assert plans["none"].serial_s < plans["op"].serial_s < plans["full"].serial_s


@pytest.mark.parametrize("bad", ["sometimes", 0, -2, "memory_budget"])
def test_unknown_policy_is_an_error(bad):
    with pytest.raises(ValueError, match="checkpointing"):
        estimate.estimate_training(TINY, seq_len=16, activation_checkpointing=bad)


def test_policy_names():
    assert checkpointing.parse(True) == "full" and checkpointing.parse(False) == "none"
    assert checkpointing.parse("3") == 3 and checkpointing.parse(" OP ") == "op"


def _recipe(tmp_path, text: str):
    p = tmp_path / "recipe.toml"
    p.write_text(text)
    return str(p)


DEBUG_RECIPE = """
[model]
name = "qwen3"
flavor = "debugmodel"
[training]
local_batch_size = 2
seq_len = 128
mixed_precision_param = "float32"
[parallelism]
tensor_parallel_degree = 2
data_parallel_shard_degree = -1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""


def test_recipe_reads_torchtitans_file(tmp_path):
    r = torchtitan_recipe.load(_recipe(tmp_path, DEBUG_RECIPE), cores=8)
    assert r.kwargs == dict(
        tp=2,
        fsdp=4,
        dp=1,
        cores=8,
        batch=2,
        seq_len=128,
        dtype="fp32",
        activation_checkpointing="op",
        sequence_parallel=True,
    )
    # The dimensions of TorchTitan's own flavor.
    from torchtitan.models.qwen3 import qwen3_args

    a = qwen3_args["debugmodel"]
    assert r.config["hidden_size"] == a.dim and r.config["num_hidden_layers"] == a.n_layers
    assert r.config["intermediate_size"] == a.hidden_dim and r.config["head_dim"] == a.head_dim


def test_recipe_defaults_are_torchtitans(tmp_path):
    r = torchtitan_recipe.load(
        _recipe(tmp_path, '[model]\nname = "llama3"\nflavor = "8B"\n'), cores=4
    )
    # selective every 2nd layer, batch 8 x 2048, FSDP over every core.
    assert r.kwargs["activation_checkpointing"] == "2"
    assert (r.kwargs["batch"], r.kwargs["seq_len"], r.kwargs["fsdp"]) == (8, 2048, 4)
    assert r.config["intermediate_size"] == 14336  # Llama 3 8B's FFN, from its sizing rule
    assert r.config["rope_scaling"]["rope_type"] == "llama3"


def test_recipe_plan_equals_the_same_plan_by_hand(tmp_path, capsys):
    path = _recipe(tmp_path, DEBUG_RECIPE)
    assert cli_main(["--torchtitan", path, "--cores", "4", "--layers", "2", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    rec = torchtitan_recipe.load(path, cores=4)
    by_hand = estimate.estimate_training(
        rec.config, config_overrides={"num_hidden_layers": 2}, **rec.kwargs
    )
    assert d["model"] == "qwen3:debugmodel" and d["fsdp"] == 2 and d["tp"] == 2
    assert d["step_s"] == pytest.approx(by_hand.step_s, rel=1e-9)
    assert d["n_items"] == by_hand.n_items
    assert any("TorchTitan recipe" in n for n in d["notes"])


@pytest.mark.parametrize(
    "text, match",
    [
        ("[parallelism]\npipeline_parallel_degree = 2\n", "pipeline parallelism"),
        ("[parallelism]\nexpert_parallel_degree = 4\n", "expert parallelism"),
        ('[model]\nname = "qwen3"\nflavor = "30B-A3B"\n', "mixture of experts"),
        ('[model]\nname = "qwen3"\nflavor = "9B"\n', "no flavor"),
        ('[activation_checkpoint]\nmode = "memory_budget"\n', "memory_budget"),
        ('[model]\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = 3\n', "multiple"),
    ],
)
def test_recipe_refuses_what_it_cannot_plan(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        torchtitan_recipe.load(_recipe(tmp_path, text), cores=8)


def test_recipe_cli_errors(tmp_path, capsys):
    path = _recipe(tmp_path, DEBUG_RECIPE)
    assert cli_main(["--torchtitan", path]) == 2  # shard degree -1 without --cores
    assert "--cores" in capsys.readouterr().err
    assert cli_main(["--torchtitan", str(tmp_path / "missing.toml"), "--cores", "2"]) == 2
    with pytest.raises(SystemExit):
        cli_main(["--torchtitan", path, "--model", "qwen3-8b"])
