"""Profile a few training steps of the example GPT on neuron: tables, summary, timeline.

Run from the repo root::

    python examples/profiling/profile_gpt.py --out examples/profiling/timeline.png

It trains the small GPT of examples/gpt under ``torch.profiler.profile`` (host and
device activities, a wait/warmup/active schedule), marks every layer's forward with
``record_function`` from module hooks, then

1. exports the profile's Parquet tables (``torch_neuronx.profiling.export_parquet``)
   and reads them back with pandas,
2. prints the device items with the largest estimated Trainium time,
3. prints a per-layer breakdown (measured device time and estimated Trainium time of
   each layer's forward and backward work, the optimizer and the input copies),
4. prints the step summary (compute- or memory-bound, estimated MFU),
5. draws one step as a timeline PNG: the host thread's top-level ops and layers, each
   device stream's items as measured, and the stream's estimated Trainium timeline.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

try:
    # `import torch` normally loads torch_neuronx through its backend entry point.
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

# The repo root, for `examples.gpt.*` when run as a script.
# A bare sys.path.insert is the one statement E402 permits before imports.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch_neuronx.profiling.summary as summary
import torch_neuronx.profiling.tables as tables
from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import build_model, make_optimizer, parse_device, train_step

LAYER_PREFIX = "layer:"
ROOT_LAYER = "gpt"
DEFAULT_OUT = Path(__file__).resolve().parent / "timeline.png"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="neuron")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="timeline PNG")
    p.add_argument(
        "--tables", type=Path, help="directory for the Parquet tables (default: a temporary one)"
    )
    p.add_argument("--trace", type=Path, help="also export the Chrome trace here")
    p.add_argument("--wait", type=int, default=1, help="schedule: steps not profiled")
    p.add_argument("--warmup", type=int, default=1, help="schedule: steps traced, discarded")
    p.add_argument("--active", type=int, default=2, help="schedule: steps recorded")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--top", type=int, default=10, help="rows of the top-items table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="do not wait for the device at the end of each step (the device then runs "
        "behind the host, a step's work spilling into the next steps)",
    )
    args = p.parse_args(argv)
    if args.active < 1 or args.wait < 0 or args.warmup < 0:
        p.error("--active must be >= 1, --wait and --warmup >= 0")
    return args


def add_layer_ranges(model: torch.nn.Module) -> None:
    """A record_function range per layer's forward, opened and closed by module hooks
    (the model's code stays as it is). Backward work is attributed to layers later,
    through the autograd nodes' link to their forward op."""
    layers = {"tok_emb": "embedding", "pos_emb": "embedding", "ln_f": "head", "lm_head": "head"}
    for name, module in model.named_modules():
        # The model itself: its own ops (embedding sum, the loss) outside the layers.
        label = ROOT_LAYER if name == "" else layers.get(name)
        if name.startswith("blocks.") and name.count(".") == 1:
            label = "block " + name.split(".")[1]
        if label is None:
            continue

        def pre(mod, _inputs, label=label):
            rf = record_function(LAYER_PREFIX + label)
            rf.__enter__()
            mod._profile_ranges = [*getattr(mod, "_profile_ranges", []), rf]

        def post(mod, _inputs, _output):
            mod._profile_ranges.pop().__exit__(None, None, None)

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)


def op_labels(ops: pd.DataFrame) -> pd.DataFrame:
    """Each host op's (layer, phase).

    Forward: the innermost ``layer:`` range around the op. Backward: an autograd node
    (``autograd::engine::evaluate_function: ...``) carries the sequence number and
    thread of the forward op that made it, so its work goes to that op's layer.
    The optimizer's step and zero_grad, and the ``data`` range, are their own layer.
    """
    name = dict(zip(ops["correlation"], ops["name"].astype(str), strict=True))
    parent = dict(zip(ops["correlation"], ops["parent"], strict=True))

    def ancestors(c):
        seen = set()
        while c in name and c not in seen:
            seen.add(c)
            yield c
            c = parent[c]

    forward_layer: dict[int, str] = {}
    for c in ops["correlation"]:
        for a in ancestors(c):
            if name[a].startswith(LAYER_PREFIX):
                forward_layer[c] = name[a][len(LAYER_PREFIX) :]
                break
    by_seq = {}
    for c, thread, seq in zip(ops["correlation"], ops["thread"], ops["sequence_nr"], strict=True):
        if seq >= 0 and c in forward_layer:
            by_seq.setdefault((thread, seq), forward_layer[c])

    rows = []
    for c in ops["correlation"]:
        layer, phase = "other", "other"
        for a in ancestors(c):
            n = name[a]
            if n.startswith(LAYER_PREFIX):
                layer, phase = n[len(LAYER_PREFIX) :], "forward"
                break
            if n.startswith("autograd::engine::evaluate_function"):
                row = ops.loc[ops["correlation"] == a].iloc[0]
                phase = "backward"
                layer = by_seq.get((int(row["fwd_thread"]), int(row["sequence_nr"])), "other")
                break
            if n.startswith("Optimizer."):
                layer, phase = "optimizer", "optimizer"
                break
            if n == "data":
                layer, phase = "data", "data"
                break
        rows.append((c, layer, phase))
    return pd.DataFrame(rows, columns=["correlation", "layer", "phase"])


def layer_breakdown(items: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """Measured and estimated time (ms) per layer, from the top-level items; the
    estimate split into the layer's forward and backward work."""
    top = items[(items["parent"] < 0) & (items["category"] != "engine")]
    labels = labels.rename(columns={"correlation": "host_correlation"})
    df = top.merge(labels, on="host_correlation", how="left").fillna(
        {"layer": "other", "phase": "other"}
    )
    df["measured_ms"] = df["duration_ns"] / 1e6
    df["estimated_ms"] = df["estimate_ns"].clip(lower=0) / 1e6
    g = df.groupby("layer")
    out = pd.DataFrame(
        {
            "items": g.size(),
            "measured ms": g["measured_ms"].sum(),
            "estimated ms": g["estimated_ms"].sum(),
        }
    )
    for phase in ("forward", "backward"):
        est = df[df["phase"] == phase].groupby("layer")["estimated_ms"].sum()
        out[f"est. {phase} ms"] = est.reindex(out.index, fill_value=0.0)
    out["est. share"] = out["estimated ms"] / out["estimated ms"].sum()
    return out.sort_values("estimated ms", ascending=False)


CATEGORY_COLORS = {
    "compute": "#4c72b0",
    "copy": "#dd8452",
    "collective": "#c44e52",
    "program": "#8172b3",
    "kernel": "#937860",
    "step": "#da8bc3",
    "marker": "#8c8c8c",
}
PHASE_COLORS = {
    "forward": "#55a868",
    "backward": "#c44e52",
    "optimizer": "#8172b3",
    "data": "#dd8452",
    "other": "#b0b0b0",
}


def draw_timeline(
    ops: pd.DataFrame,
    items: pd.DataFrame,
    labels: pd.DataFrame,
    step: tuple[int, float, float],
    target_name: str,
    out: Path,
) -> None:
    """One step (number, start us, end us) as horizontal tracks: each host thread's
    top-level ops (by phase), the forward's layer ranges, and each device stream's
    items as measured and on the estimated Trainium timeline (by category)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    number, start_us, end_us = step
    in_step = ops[(ops["start_us"] >= start_us) & (ops["start_us"] <= end_us)]
    names = in_step["name"].astype(str)
    step_rows = set(in_step.loc[names.str.startswith("ProfilerStep#"), "correlation"])
    inside = set(in_step["correlation"]) - step_rows
    # Top-level: no enclosing event inside the step other than the step itself.
    host = in_step[~in_step["parent"].isin(inside) & ~in_step["correlation"].isin(step_rows)]
    layers = in_step[names.str.startswith(LAYER_PREFIX) & (names != LAYER_PREFIX + ROOT_LAYER)]
    dev, _ = tables.select_steps(items, ops, [number])
    dev = dev[(dev["parent"] < 0) & (dev["category"] != "engine")]
    est = dev[dev["estimate_ns"] > 0]
    est_end = est["estimate_start_us"] + est["estimate_ns"] / 1e3
    t_end = max([end_us, *dev["end_us"].tolist(), *est_end.tolist()])
    phase_of = dict(zip(labels["correlation"], labels["phase"], strict=True))

    def bars(starts, ends, colors, texts):
        return [
            ((s - start_us) / 1e3, (e - s) / 1e3, c, str(t))
            for s, e, c, t in zip(starts, ends, colors, texts, strict=True)
        ]

    def category_colors(df):
        return [CATEGORY_COLORS.get(str(c), "#333333") for c in df["category"]]

    rows = []
    for thread, g in host.groupby("thread", sort=True):
        colors = [PHASE_COLORS[phase_of.get(c, "other")] for c in g["correlation"]]
        rows.append((f"host thread {thread}", bars(g["start_us"], g["end_us"], colors, g["name"])))
    if len(layers):
        texts = layers["name"].astype(str).str.removeprefix(LAYER_PREFIX)
        colors = [PHASE_COLORS["forward"]] * len(layers)
        rows.append(("layers (forward)", bars(layers["start_us"], layers["end_us"], colors, texts)))
    for (device, stream), g in dev.groupby(["device", "stream"], sort=True):
        rows.append(
            (
                f"neuron:{device} stream {stream}",
                bars(g["start_us"], g["end_us"], category_colors(g), g["name"]),
            )
        )
        e = est[(est["device"] == device) & (est["stream"] == stream)]
        rows.append(
            (
                f"neuron:{device} stream {stream}\n(estimated {target_name})",
                bars(
                    e["estimate_start_us"],
                    e["estimate_start_us"] + e["estimate_ns"] / 1e3,
                    category_colors(e),
                    e["name"],
                ),
            )
        )

    span = (t_end - start_us) / 1e3
    fig, ax = plt.subplots(figsize=(14, 1.6 + 0.7 * len(rows)), dpi=110)
    for y, (_label, row) in enumerate(reversed(rows)):
        for x, w, color, text in row:
            # A minimum width keeps microsecond items visible on a millisecond axis.
            ax.broken_barh([(x, max(w, span * 2e-4))], (y - 0.38, 0.76), facecolors=color)
            if w > span * 0.06:
                ax.text(x + w / 2, y, text[:24], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=8)
    ax.set_xlim(0, span)
    ax.set_xlabel(f"ms from the start of ProfilerStep#{number}")
    ax.set_title(f"GPT training step {number}: host, device streams, estimated {target_name} time")
    handles = [Patch(color=c, label=p) for p, c in PHASE_COLORS.items()]
    handles += [
        Patch(color=CATEGORY_COLORS[c], label=f"device {c}")
        for c in sorted(set(dev["category"].astype(str)) & set(CATEGORY_COLORS))
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.25),
        ncol=len(handles),
        fontsize=7,
        frameon=False,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    t0 = time.perf_counter()
    device = parse_device(args.device)
    cfg = GPTConfig(
        vocab_size=get_tokenizer().vocab_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        d_model=args.d_model,
        seq_len=args.seq_len,
    )
    model = build_model(cfg, device, args.seed)
    optimizer = make_optimizer(model, 3e-4)
    add_layer_ranges(model)
    model.train()
    gen = torch.Generator().manual_seed(args.seed)
    total_steps = args.wait + args.warmup + args.active
    activities = [ProfilerActivity.CPU]
    if device.type != "cpu":
        activities.append(ProfilerActivity.PrivateUse1)
    with profile(
        activities=activities,
        schedule=schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
        record_shapes=True,
        with_flops=True,
    ) as prof:
        for _ in range(total_steps):
            with record_function("data"):
                x, y = get_batch("train", args.batch, args.seq_len, device, gen)
            loss = train_step(model, optimizer, x, y)
            if args.sync:
                # As a loop logging its loss every step: the step's device work
                # finishes inside its ProfilerStep range.
                loss.item()
            prof.step()
    t_train = time.perf_counter() - t0
    print(
        f"profiled {args.active} of {total_steps} steps: n_layer={args.n_layer} "
        f"d_model={args.d_model} batch={args.batch} seq_len={args.seq_len} ({t_train:.1f} s)"
    )
    if args.trace:
        prof.export_chrome_trace(str(args.trace))
        print(f"Chrome trace: {args.trace}")

    with contextlib.ExitStack() as stack:
        tables_dir = args.tables
        if tables_dir is None:
            tables_dir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        paths = tables.export_parquet(prof, tables_dir)
        print(f"tables: {', '.join(p.name for p in paths.values())} in {tables_dir}")
        ops = pd.read_parquet(paths["ops"])
        items = pd.read_parquet(paths["device_items"])

    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 20)
    # The recorded steps' work (the warmup steps' device items are in the profile too).
    items, steps = tables.select_steps(items, ops)
    top = items[(items["parent"] < 0) & (items["category"] != "engine")]
    by_name = (
        top.assign(
            measured_ms=top["duration_ns"] / 1e6,
            estimated_ms=top["estimate_ns"].clip(lower=0) / 1e6,
        )
        .groupby(["name", "category"])
        .agg(
            count=("seq", "size"),
            measured_ms=("measured_ms", "sum"),
            estimated_ms=("estimated_ms", "sum"),
            flops=("flops", "sum"),
        )
        .sort_values("estimated_ms", ascending=False)
        .head(args.top)
    )
    target_name = summary.target()["name"]
    print(f"\n== top device items (steps {steps}, by estimated {target_name} time) ==")
    print(by_name.round(4).to_string())

    labels = op_labels(ops)
    print(f"\n== per-layer breakdown (steps {steps}) ==")
    print(layer_breakdown(items, labels).round(4).to_string())

    print("\n== step summary ==")
    summary.print_summary(prof, top=5)

    print("\n== timeline ==")
    ranges = tables.step_ranges(ops)
    if len(ranges) and len(items):
        last = ranges.iloc[-1]
        step = (int(last["step"]), float(last["start_us"]), float(last["end_us"]))
        draw_timeline(ops, items, labels, step, target_name, args.out)
        print(f"ProfilerStep#{step[0]} drawn to {args.out}")
    else:
        print("no profiled step with device items: nothing drawn")
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
