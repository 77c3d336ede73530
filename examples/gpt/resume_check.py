"""Stop and resume the small GPT from a checkpoint; check the losses are bit-identical.

Trains N steps, saves a checkpoint (model, optimizer, the CPU and device RNG states,
the data generator), trains M more steps, then starts a fresh Python process that
loads the checkpoint and redoes the same M steps. Both loss sequences are printed
with whether they are bit-identical. Dropout is on by default so that the RNG state
matters. Example (from the repo root)::

    python examples/gpt/resume_check.py --device neuron --steps 20 --more 20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

try:
    import torch_neuronx  # noqa: F401  (explicit load when autoloading is off)
except ImportError:
    pass

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import build_model, make_optimizer, parse_device, synchronize, train_step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="neuron")
    p.add_argument("--steps", type=int, default=20, help="steps before the checkpoint")
    p.add_argument("--more", type=int, default=20, help="steps after it (done twice)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--n-layer", type=int, default=GPTConfig.n_layer)
    p.add_argument("--n-head", type=int, default=GPTConfig.n_head)
    p.add_argument("--d-model", type=int, default=GPTConfig.d_model)
    p.add_argument("--checkpoint", default=None, help="path (default: a temporary file)")
    # Internal: the fresh process that resumes from the checkpoint.
    p.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 1 or args.more < 1:
        p.error("--steps and --more must be >= 1")
    return args


def setup(args: argparse.Namespace):
    device = parse_device(args.device)
    cfg = GPTConfig(
        vocab_size=get_tokenizer().vocab_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        d_model=args.d_model,
        seq_len=args.seq_len,
        dropout=args.dropout,
    )
    model = build_model(cfg, device, args.seed)
    model.train()
    optimizer = make_optimizer(model, args.lr)
    data_gen = torch.Generator().manual_seed(args.seed)
    return device, model, optimizer, data_gen


def run(args, device, model, optimizer, data_gen, steps: int) -> tuple[list[float], float]:
    """Trains `steps` steps; returns the losses and the time per step in ms."""
    synchronize(device)
    t0 = time.perf_counter()
    pending = []
    for _ in range(steps):
        x, y = get_batch("train", args.batch, args.seq_len, device, data_gen)
        pending.append(train_step(model, optimizer, x, y))
    losses = torch.stack(pending).float().cpu().tolist()
    return losses, (time.perf_counter() - t0) / steps * 1e3


def device_rng_states(device: torch.device) -> list[torch.Tensor]:
    if device.type == "cpu":
        return []
    return torch.get_device_module(device.type).get_rng_state_all()


def save_checkpoint(path: str, device, model, optimizer, data_gen, step: int) -> None:
    torch.save(
        {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "cpu_rng": torch.get_rng_state(),
            "device_rng": device_rng_states(device),
            "data_rng": data_gen.get_state(),
        },
        path,
    )


def resume(args: argparse.Namespace) -> None:
    device, model, optimizer, data_gen = setup(args)
    # No map_location: the RNG states must stay CPU tensors; tensors return to the
    # devices they were saved from. weights_only=True is the default.
    ckpt = torch.load(args.checkpoint)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["cpu_rng"])
    if ckpt["device_rng"]:
        torch.get_device_module(device.type).set_rng_state_all(ckpt["device_rng"])
    data_gen.set_state(ckpt["data_rng"])
    losses, ms = run(args, device, model, optimizer, data_gen, args.more)
    print("RESUMED " + json.dumps({"losses": [v.hex() for v in losses], "ms": ms}), flush=True)


def main() -> None:
    args = parse_args()
    if args.resume:
        resume(args)
        return
    tmp = None
    if args.checkpoint is None:
        tmp = tempfile.TemporaryDirectory()
        args.checkpoint = str(Path(tmp.name) / "gpt_resume.pt")

    device, model, optimizer, data_gen = setup(args)
    print(
        f"device={device} params={model.num_params() / 1e6:.2f}M dropout={args.dropout} "
        f"steps={args.steps}+{args.more} batch={args.batch} seq_len={args.seq_len}",
        flush=True,
    )
    first, ms_first = run(args, device, model, optimizer, data_gen, args.steps)
    save_checkpoint(args.checkpoint, device, model, optimizer, data_gen, args.steps)
    size = Path(args.checkpoint).stat().st_size
    straight, ms_straight = run(args, device, model, optimizer, data_gen, args.more)

    # A fresh interpreter: nothing but the checkpoint carries the state over.
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "resume"]
    cmd = [sys.executable, __file__, *argv, "--resume"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"resumed process failed (rc={out.returncode}):\n{out.stderr}")
    line = next(s for s in out.stdout.splitlines() if s.startswith("RESUMED "))
    res = json.loads(line.removeprefix("RESUMED "))
    resumed = [float.fromhex(v) for v in res["losses"]]

    print(f"checkpoint: {size / 2**20:.1f} MiB after step {args.steps} (loss {first[-1]:.4f})")
    print(f"{'step':>5} {'continued':>12} {'resumed':>12}")
    for i, (a, b) in enumerate(zip(straight, resumed, strict=True)):
        print(f"{args.steps + i + 1:5d} {a:12.6f} {b:12.6f}{'' if a == b else '  differs'}")
    identical = straight == resumed
    print(
        f"ms/step: before checkpoint {ms_first:.1f}, continued {ms_straight:.1f}, "
        f"resumed {res['ms']:.1f}"
    )
    print(f"bit-identical: {identical}")
    if tmp is not None:
        tmp.cleanup()
    sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
