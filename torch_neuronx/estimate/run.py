"""A planning run: build the model with fake tensors on neuron, lay it out over
the fake process group, run one step under the capture mode, and turn the
captured items into a Report."""

from __future__ import annotations

import contextlib
import inspect
import re
import time
from collections import defaultdict

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import checkpointing as ckpt
from . import layout as lay
from . import models
from .capture import Capture
from .cost import CostModel
from .memory import MemoryTracker
from .report import Report
from .target import make_target

_LAYER = re.compile(r"^\d+$")


def _layer_of(module: str) -> str:
    """A module path cut after its first numeric part (``...layers.3``): the
    per-layer breakdown's row."""
    parts = module.split(".")
    for i, p in enumerate(parts):
        if _LAYER.match(p):
            return ".".join(parts[: i + 1])
    return ".".join(parts[:3]) if parts != [""] else "(outside modules)"


@contextlib.contextmanager
def _maybe(cm):
    if cm is None:
        yield
    else:
        with cm:
            yield


class _Planner:
    def __init__(self, target, lnc, layout: lay.Layout, cores):
        self.target = make_target(target, lnc)
        self.layout = layout
        if cores is not None and cores != layout.world:
            layout.check(cores=cores)
        self.cost = CostModel(self.target)
        self.memory = MemoryTracker()
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)

    def capture(self):
        # lazy: ModTracker imports Dynamo (seconds), DTensor too (layout.py)
        from torch.distributed._tools.mod_tracker import ModTracker

        cap = Capture(self.cost, self.memory, ModTracker(), fake_mode=self.fake)
        cap.group_label = self.layout.group_of
        return cap

    def start_memory(self, tensors) -> int:
        for t in tensors:
            self.memory.add(t)
        return self.memory.live


def _opt_state_tensors(opt) -> list:
    out = []
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


def _uses_dtensor(params) -> bool:
    from torch.distributed.tensor import DTensor  # lazy: DTensor (layout.py)

    return any(isinstance(p, DTensor) for p in params)


def _init_optimizer(opt, params) -> None:
    """Creates the optimizer's state (as a first step would) outside the captured
    step, so the step planned is a steady-state one."""
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _summarize(
    planner: _Planner,
    cap: Capture,
    *,
    model_name,
    mode,
    batch,
    seq_len,
    dtype,
    model_flops,
    tokens,
    at_start,
    wall,
    notes,
    overlap_groups=("fsdp", "dp", "dp+fsdp"),
    extra=None,
) -> Report:
    t = planner.target
    lo = planner.layout
    compute_ns = 0.0
    parts = defaultdict(float)
    per_phase = defaultdict(float)
    per_layer = defaultdict(float)
    per_group = {}
    by_name = {}
    bound_ns = defaultdict(float)
    executed = 0.0
    coll_total = 0.0
    coll_overlap = 0.0
    for (name, cat, module, phase, c, detail), n in cap.counts.items():
        ns = c.estimate_ns * n
        per_phase[phase] += ns
        # Outside any module (ModTracker's "Global"): the optimizer step, and
        # FSDP's last reduce-scatters, which run after the modules' hooks.
        per_layer[f"({phase})" if module in ("Global", "") else _layer_of(module)] += ns
        e = by_name.setdefault(name, {"name": name, "count": 0, "ns": 0.0, "b": defaultdict(float)})
        e["count"] += n
        e["ns"] += ns
        if cat == "collective":
            coll_total += ns
            g = per_group.setdefault(detail, {"count": 0, "bytes": 0.0, "s": 0.0})
            g["count"] += n
            g["bytes"] += c.bytes * n
            g["s"] += ns * 1e-9
            if detail in overlap_groups:
                coll_overlap += ns
            e["b"]["network"] += ns
        else:
            compute_ns += ns
            executed += (c.flops if c.tensor_engine else 0.0) * n
            for p in ("compute_ns", "dma_ns", "latency_ns", "overlap_ns"):
                parts[p[:-3]] += getattr(c, p) * n
            e["b"][c.bound] += ns
            bound_ns[c.bound] += ns
    serial = compute_ns + coll_total
    blocking = coll_total - coll_overlap
    # FSDP/DP collectives run on their own streams beside compute (prefetched
    # all-gathers, reduce-scatters after each layer's backward): only what
    # exceeds the compute shows. TP collectives sit between the ops that need
    # their result.
    exposed = blocking + max(0.0, coll_overlap - compute_ns)
    step_ns = compute_ns + exposed
    bound_ns["network"] = exposed
    step_s = step_ns * 1e-9
    peak = t.peak_flops_per_s(2 if dtype in ("bf16", "bfloat16", "fp16", "float16") else 4)
    mfu = model_flops / (peak * lo.world * step_s) if step_s > 0 else 0.0
    hfu = executed / (peak * step_s) if step_s > 0 else 0.0
    total_ns = sum(per_layer.values()) or 1.0
    layers = [
        {"module": k, "s": v * 1e-9, "share": v / total_ns} for k, v in per_layer.items() if v > 0
    ]
    top = sorted(by_name.values(), key=lambda e: -e["ns"])
    top_items = [
        {
            "name": e["name"],
            "count": e["count"],
            "s": e["ns"] * 1e-9,
            "share": e["ns"] / total_ns,
            "bound": max(e["b"], key=e["b"].get) if e["b"] else "",
        }
        for e in top[:20]
    ]
    bsum = sum(bound_ns.values()) or 1.0
    split = {k: bound_ns.get(k, 0.0) / bsum for k in ("compute", "memory", "latency", "network")}
    bound = max(split, key=split.get)
    cap_bytes = t.hbm_bytes_per_core
    peak_bytes = max(planner.memory.peak, at_start)
    r = Report(
        model=model_name,
        mode=mode,
        target=t.name,
        lnc=t.lnc,
        tp=lo.tp,
        fsdp=lo.fsdp,
        dp=lo.dp,
        cores=lo.world,
        batch=batch,
        seq_len=seq_len,
        dtype=dtype,
        step_s=step_s,
        serial_s=serial * 1e-9,
        compute_s=compute_ns * 1e-9,
        collective_s=coll_total * 1e-9,
        exposed_collective_s=exposed * 1e-9,
        parts_s={k: v * 1e-9 for k, v in parts.items()},
        bound=bound,
        bound_split=split,
        per_phase_s={k: v * 1e-9 for k, v in per_phase.items()},
        per_layer=layers,
        per_group=per_group,
        top_items=top_items,
        items={e["name"]: {"count": e["count"], "s": e["ns"] * 1e-9} for e in top},
        n_items=cap.n_items,
        model_flops=model_flops,
        executed_flops=executed,
        mfu=mfu,
        hfu=hfu,
        tokens_per_s=tokens / step_s if step_s > 0 else 0.0,
        hbm_peak_bytes=int(peak_bytes),
        hbm_capacity_bytes=int(cap_bytes),
        hbm_at_start_bytes=int(at_start),
        fits=peak_bytes <= cap_bytes,
        wall_s=wall,
        cost_calls=planner.cost.calls,
        notes=list(notes),
    )
    for k, v in (extra or {}).items():
        setattr(r, k, v)
    return r


def _check_sp(sequence_parallel: bool, tp: int) -> None:
    # A sequence TP does not divide is sharded as DTensor shards it (rank 0
    # takes the larger share, as a run padded to a multiple of TP computes).
    if sequence_parallel and tp == 1:
        raise ValueError("sequence_parallel needs tp > 1 (it shards the sequence over TP ranks)")


def plan_training(
    model,
    *,
    target: str = "trn2",
    lnc: int | None = None,
    tp: int = 1,
    fsdp: int = 1,
    dp: int = 1,
    cores: int | None = None,
    batch: int = 1,
    seq_len: int = 2048,
    dtype: str = "bf16",
    lr: float = 1e-4,
    activation_checkpointing: bool | str | int = False,
    sequence_parallel: bool = False,
    inputs=None,
    loss=None,
    config_overrides: dict | None = None,
) -> Report:
    """Estimates one training step (forward, loss, backward, AdamW step) of rank 0.

    ``model``: a Hugging Face model name (built-in configurations in
    ``models.KNOWN_CONFIGS``, else looked up), a config dict with ``model_type``,
    a transformers config — or a callable returning an ``nn.Module`` (built on
    neuron under the fake mode), with ``inputs`` (a callable returning the
    forward's argument tuple) and ``loss`` (``loss(output, *inputs)``).
    ``batch`` is per data-parallel rank (FSDP and DP ranks each take ``batch``
    sequences; TP ranks share theirs). ``sequence_parallel``: TP with sequence
    parallelism (norms on S/TP rows, reduce-scatter and all-gather in place of
    TP's all-reduce; needs tp > 1 and a Hugging Face model).
    ``activation_checkpointing``: ``False``/``"none"``, ``True``/``"full"``,
    ``"op"`` (TorchTitan's per-op selective policy) or a layer frequency *k*
    (every *k*-th layer recomputed): ``checkpointing.py``."""
    layout = lay.Layout(tp, fsdp, dp)
    layout.check(cores=cores)
    _check_sp(sequence_parallel, tp)
    recompute = ckpt.parse(activation_checkpointing)
    dt = models.parse_dtype(dtype)
    hf = not callable(model)
    cfg = models.hf_config(model, config_overrides) if hf else None
    if cfg is not None:
        layout.check(cfg)
    if batch < 1 or seq_len < 1:
        raise ValueError(f"batch and seq_len must be positive, not {batch} and {seq_len}")
    if not hf and (inputs is None or loss is None):
        raise ValueError("a model given as a callable needs inputs= and loss= callables")
    if not hf and sequence_parallel:
        raise ValueError("sequence_parallel needs a Hugging Face model (its layers' names)")
    planner = _Planner(target, lnc, layout, cores)
    notes = []
    t0 = time.perf_counter()
    with lay.fake_process_group(layout.world) if layout.world > 1 else contextlib.nullcontext():
        mesh = tp_mesh = shard_mesh = None
        if layout.world > 1:
            mesh, tp_mesh, shard_mesh = lay.device_mesh(layout)
        fake = planner.fake
        with fake, torch.device("neuron"):
            if hf:
                m = models.build_hf_causal_lm(cfg, dt)
            else:
                with models.default_dtype(dt):
                    m = model()
        layers = models.decoder_layers(m) if hf else []
        if layout.world > 1 or recompute != "none":
            # Outside the fake mode: the mesh's own bookkeeping uses real CPU
            # tensors; the parameters stay fake.
            m = lay.apply(
                m,
                layers,
                layout,
                tp_mesh,
                shard_mesh,
                recompute,
                sequence_parallel=sequence_parallel,
            )
        params = [p for p in m.parameters() if p.requires_grad]
        with fake:
            opt = torch.optim.AdamW(params, lr=lr, foreach=lay.real_foreach(params))
            _init_optimizer(opt, params)
            with torch.device("neuron"):
                if hf:
                    ids = torch.randint(0, cfg.vocab_size, (batch, seq_len))
                    args = (ids,)
                else:
                    args = tuple(inputs())
        at_start = planner.start_memory(
            [lay.local(p) for p in params]
            + [lay.local(s) for s in _opt_state_tensors(opt)]
            + [a for a in args if isinstance(a, torch.Tensor)]
            + [lay.local(b) for b in m.buffers()]
        )
        cap = planner.capture()

        def step():
            cap.phase = planner.memory.phase = "step"
            if hf:
                ls = m(input_ids=args[0], labels=args[0], use_cache=False).loss
            else:
                ls = loss(m(*args), *args)
            ls.backward()
            del ls
            cap.phase = planner.memory.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)

        with fake, cap.tracker, cap, models.transformers_sees_values():
            if _uses_dtensor(params):
                # DTensor learns each op's output shape once per signature by
                # running it on fake tensors of the global shape, in this fake
                # mode: a first step fills that cache unrecorded, and the step
                # planned is the steady one (as a profile of a real job's second
                # step).
                cap.recording = False
                step()
                cap.recording = True
                planner.memory.track_resizable(lay.fsdp_resizable_tensors(m))
                planner.memory.reset_peak()
            step()
        wall = time.perf_counter() - t0
    if hf:
        flops = models.model_flops_per_token(cfg, seq_len, True) * batch * seq_len
        flops *= layout.fsdp * layout.dp
        name = model if isinstance(model, str) else getattr(cfg, "model_type", "model")
    else:
        # No architecture to count: the tensor-engine work of rank 0, as every
        # rank does the same.
        flops = sum(c.flops * n for k, n in cap.counts.items() for c in (k[4],) if c.tensor_engine)
        flops *= layout.world
        name = getattr(model, "__name__", "model")
        notes.append("model flops counted from the planned items (a custom module)")
    tokens = batch * seq_len * layout.fsdp * layout.dp
    return _summarize(
        planner,
        cap,
        model_name=name,
        mode="train",
        batch=batch,
        seq_len=seq_len,
        dtype=str(dtype),
        model_flops=flops,
        tokens=tokens,
        at_start=at_start,
        wall=wall,
        notes=notes,
    )


def plan_generate(
    model,
    *,
    target: str = "trn2",
    lnc: int | None = None,
    tp: int = 1,
    dp: int = 1,
    cores: int | None = None,
    batch: int = 1,
    prompt_len: int = 128,
    new_tokens: int = 16,
    dtype: str = "bf16",
    sequence_parallel: bool = False,
    config_overrides: dict | None = None,
) -> Report:
    """Estimates ``generate()`` of a Hugging Face causal LM: the prompt's forward
    (prefill) and ``new_tokens`` greedy decode steps with the KV cache — the loop
    generate() runs, without its stopping checks (they read values a fake run
    does not have). TP shards the layers; DP replicates (no collective).

    ``sequence_parallel``: the prefill with sequence parallelism (as NxD
    Inference compiles its context-encoding model), the decode steps without
    (its token-generation model: one token has no sequence to shard). The two
    are separate modules over the same layout and KV cache; the prefill's
    parameters stand for the decode's and are not counted twice."""
    layout = lay.Layout(tp, 1, dp)
    layout.check(cores=cores)
    _check_sp(sequence_parallel, tp)
    if new_tokens < 1 or prompt_len < 1 or batch < 1:
        raise ValueError("batch, prompt_len and new_tokens must be positive")
    dt = models.parse_dtype(dtype)
    cfg = models.hf_config(model, config_overrides)
    layout.check(cfg)
    planner = _Planner(target, lnc, layout, cores)
    t0 = time.perf_counter()
    with lay.fake_process_group(layout.world) if layout.world > 1 else contextlib.nullcontext():
        tp_mesh = None
        if layout.world > 1:
            _, tp_mesh, _ = lay.device_mesh(layout)
        fake = planner.fake
        with fake, torch.device("neuron"):
            m = models.build_hf_causal_lm(cfg, dt)
            m.eval()
        if layout.tp > 1:
            m = lay.apply(m, models.decoder_layers(m), lay.Layout(tp, 1, 1), tp_mesh, None)
        m_prefill = m
        if sequence_parallel:
            with fake, torch.device("neuron"):
                m_prefill = models.build_hf_causal_lm(cfg, dt)
                m_prefill.eval()
            # The embedding stays whole (its output chunked onto the
            # sequence) so both modules hold the same weights.
            m_prefill = lay.apply(
                m_prefill,
                models.decoder_layers(m_prefill),
                lay.Layout(tp, 1, 1),
                tp_mesh,
                None,
                sequence_parallel=True,
                vocab_parallel=False,
            )
        with fake, torch.device("neuron"):
            ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len))
        at_start = planner.start_memory(
            [lay.local(p) for p in m.parameters()] + [ids] + [lay.local(b) for b in m.buffers()]
        )
        if m_prefill is not m:
            for t in (*m_prefill.parameters(), *m_prefill.buffers()):
                planner.memory.stand_in(t)
        cap = planner.capture()
        # The KV cache's keyword: `cache` in recent transformers, before it
        # `past_key_values` (still accepted, with a deprecation warning).
        from transformers import DynamicCache  # optional: transformers (models.py)

        kw = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"

        def run():
            cap.phase = planner.memory.phase = "prefill"
            cache = DynamicCache(config=cfg)
            out = m_prefill(input_ids=ids, use_cache=True, **{kw: cache})
            nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            done = sum(k[4].estimate_ns * n for k, n in cap.counts.items())
            cap.phase = planner.memory.phase = "decode"
            for _ in range(new_tokens - 1):
                out = m(input_ids=nxt, use_cache=True, **{kw: cache})
                nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            return done

        with fake, cap.tracker, cap, torch.no_grad(), models.transformers_sees_values():
            if layout.tp > 1:
                # DTensor's per-signature shape propagation, filled unrecorded
                # (see plan_training).
                cap.recording = False
                run()
                cap.recording = True
                planner.memory.reset_peak()
            prefill_ns = run()
        wall = time.perf_counter() - t0
    total_ns = sum(k[4].estimate_ns * n for k, n in cap.counts.items())
    decode_ns = total_ns - prefill_ns
    flops = (
        models.model_flops_per_token(cfg, prompt_len, False) * batch * (prompt_len + new_tokens - 1)
    )
    flops *= layout.dp
    notes = []
    name = model if isinstance(model, str) else getattr(cfg, "model_type", "model")
    return _summarize(
        planner,
        cap,
        model_name=name,
        mode="generate",
        batch=batch,
        seq_len=prompt_len,
        dtype=str(dtype),
        model_flops=flops,
        tokens=batch * new_tokens * layout.dp,
        at_start=at_start,
        wall=wall,
        notes=notes,
        overlap_groups=(),
        extra={
            "prefill_s": prefill_ns * 1e-9,
            "decode_step_s": decode_ns * 1e-9 / max(1, new_tokens - 1),
            "new_tokens": new_tokens,
        },
    )
