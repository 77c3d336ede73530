"""Train the small character-level GPT on a device.

Example (from the repo root)::

    python examples/gpt/train.py --device neuron --steps 300 --batch 8 --seq-len 128 \\
        --lr 3e-4 --seed 0 --log-every 20

``--amp bf16`` runs the forward pass (model and loss) under
``torch.autocast(device, dtype=torch.bfloat16)``; the default is float32 throughout.

``--compile`` trains with ``torch.compile``: the model's forward and backward and the
AdamW step as compiled graphs (backend ``neuron`` on neuron, ``inductor`` elsewhere),
each one work item per step on the device; the losses match eager mode to float
tolerance. ``--compile-mode reduce-overhead`` also captures each compiled graph
once and replays it (torch.neuron graphs; AdamW then keeps its step on the device,
``capturable=True``).

``train(args)`` returns the per-step losses so tests and benchmarks can import it::

    from examples.gpt.train import parse_args, train
    losses = train(parse_args(["--device", "cpu", "--steps", "5"]))
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

try:
    # `import torch` normally loads torch_neuronx through its backend entry point;
    # importing it explicitly also covers environments where autoloading is off.
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

# The repo root goes on sys.path so `examples.gpt.*` resolves both when this file is
# run as a script and when it is imported by benchmarks or tests.
# A bare sys.path.insert is the one statement E402 permits before imports.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPT, GPTConfig


def parse_device(name: str) -> torch.device:
    """torch.device(name), with a hint when the backend providing it is missing."""
    try:
        return torch.device(name)
    except RuntimeError as e:
        sys.exit(f"unknown device {name!r} ({e}); is torch_neuronx installed?")


def synchronize(device: torch.device) -> None:
    """Wait until all queued work on device has finished (no-op on CPU).

    Needed before reading a clock on an asynchronous device; otherwise only the time
    to enqueue the work is measured.
    """
    if device.type == "neuron":
        torch.neuron.synchronize()
    elif device.type != "cpu":
        torch.accelerator.synchronize(device)


def memory_in_use(device: torch.device) -> str:
    """Bytes held by live tensors on the device, formatted for a log line."""
    if device.type == "neuron":
        nbytes = torch.neuron.memory_allocated()
    elif device.type == "cuda":
        nbytes = torch.cuda.memory_allocated(device)
    elif device.type == "cpu":
        # PyTorch does not track CPU tensor memory.
        return "n/a"
    else:
        nbytes = torch.accelerator.memory_allocated(device)
    return f"{nbytes / 2**20:.1f} MiB"


def build_model(cfg: GPTConfig, device: torch.device, seed: int) -> GPT:
    # Initialise on the CPU under a fixed seed and then move, so every device starts
    # from bit-identical weights and results are comparable across devices.
    torch.manual_seed(seed)
    return GPT(cfg).to(device)


def make_optimizer(model: GPT, lr: float, capturable: bool = False) -> torch.optim.AdamW:
    # foreach/fused are deliberately left unset: PyTorch then picks its default,
    # which is the multi-tensor (foreach) path for accelerator devices such as
    # neuron, and the per-tensor loop on CPU. capturable keeps the step count on
    # the device (what a captured graph needs).
    return torch.optim.AdamW(model.parameters(), lr=lr, capturable=capturable)


def compile_model(model: GPT, device: torch.device, mode: str | None = None):
    """The model under torch.compile, with the device's own backend where it has one."""
    backend = "neuron" if device.type == "neuron" else "inductor"
    return torch.compile(model, backend=backend, mode=mode)


def compile_optimizer(
    optimizer: torch.optim.Optimizer, device: torch.device, mode: str | None = None
) -> None:
    """optimizer.step() under torch.compile (one program for all parameters)."""
    backend = "neuron" if device.type == "neuron" else "inductor"
    optimizer.step = torch.compile(optimizer.step, backend=backend, mode=mode)


# --amp choices: the autocast dtype of each (None = no autocast, float32 throughout).
AMP_DTYPES = {"none": None, "bf16": torch.bfloat16}


def autocast_context(device: torch.device, amp_dtype: torch.dtype | None):
    """Autocast for the forward pass, or nothing when amp_dtype is None."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype)


def train_step(
    model: GPT,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    amp_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One forward/backward/update. Returns the loss as a device tensor (no sync).

    With amp_dtype, the forward pass and loss run under autocast; backward runs
    outside it (each backward op takes the dtype of its forward op) and the
    parameters, gradients and optimizer state stay float32. bfloat16 has float32's
    exponent range, so no loss scaling is needed.
    """
    with autocast_context(x.device, amp_dtype):
        _, loss = model(x, y)
    # set_to_none frees gradient buffers between steps instead of zero-filling them.
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="neuron", help="e.g. neuron, cpu, cuda")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument(
        "--amp",
        choices=sorted(AMP_DTYPES),
        default="none",
        help="autocast dtype for the forward pass (default: none, float32)",
    )
    # Model size; defaults are GPTConfig's. Smaller values make quick smoke tests.
    p.add_argument("--n-layer", type=int, default=GPTConfig.n_layer)
    p.add_argument("--n-head", type=int, default=GPTConfig.n_head)
    p.add_argument("--d-model", type=int, default=GPTConfig.d_model)
    p.add_argument("--sample-chars", type=int, default=100, help="0 disables the sample")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (backend neuron on neuron, inductor elsewhere)",
    )
    p.add_argument(
        "--compile-mode",
        choices=("default", "reduce-overhead"),
        default="default",
        help="torch.compile mode (reduce-overhead: captured graphs, replayed)",
    )
    args = p.parse_args(argv)
    if args.steps < 1 or args.log_every < 1:
        p.error("--steps and --log-every must be >= 1")
    return args


def train(args: argparse.Namespace) -> list[float]:
    """Train per args and return the loss of every step, in order."""
    device = parse_device(args.device)
    tokenizer = get_tokenizer()
    cfg = GPTConfig(
        vocab_size=tokenizer.vocab_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        d_model=args.d_model,
        seq_len=args.seq_len,
    )
    model = build_model(cfg, device, args.seed)
    captures = args.compile and args.compile_mode == "reduce-overhead"
    optimizer = make_optimizer(model, args.lr, capturable=captures and device.type != "cpu")
    # The compiled module shares the model's parameters: the optimizer and the
    # sampling below use the model itself.
    step_model = model
    if args.compile:
        step_model = compile_model(model, device, args.compile_mode)
        compile_optimizer(optimizer, device, args.compile_mode)
    # Batches come from a CPU generator so the data order depends only on the seed.
    gen = torch.Generator().manual_seed(args.seed)
    print(
        f"device={device} params={model.num_params() / 1e6:.2f}M "
        f"vocab={cfg.vocab_size} steps={args.steps} batch={args.batch} "
        f"seq_len={args.seq_len} lr={args.lr} seed={args.seed} amp={args.amp} "
        f"compile={args.compile}{' ' + args.compile_mode if args.compile else ''}",
        flush=True,
    )

    losses: list[float] = []
    # Losses stay on the device until a log point: calling .item() every step would
    # force a device sync per step and hide the asynchronous pipelining we measure.
    pending: list[torch.Tensor] = []
    tokens_per_step = args.batch * args.seq_len
    model.train()
    synchronize(device)
    t_start = t_last = time.perf_counter()
    step_last = 0
    for step in range(1, args.steps + 1):
        x, y = get_batch("train", args.batch, args.seq_len, device, gen)
        pending.append(train_step(step_model, optimizer, x, y, AMP_DTYPES[args.amp]))
        if step % args.log_every == 0 or step == args.steps:
            # One sync per log interval: .tolist() waits for the queued steps, so the
            # clock read after it covers their full execution.
            losses.extend(torch.stack(pending).float().cpu().tolist())
            pending.clear()
            synchronize(device)
            now = time.perf_counter()
            tok_s = (step - step_last) * tokens_per_step / (now - t_last)
            print(
                f"step {step:5d} | loss {losses[-1]:.4f} | {tok_s:9.0f} tok/s | "
                f"mem {memory_in_use(device)}",
                flush=True,
            )
            t_last, step_last = now, step

    ms_per_step = (t_last - t_start) / args.steps * 1e3
    print(f"final loss {losses[-1]:.4f} | {ms_per_step:.1f} ms/step")
    if args.sample_chars > 0:
        model.eval()
        prompt = torch.tensor([tokenizer.encode("Return ")], device=device)
        sample_gen = torch.Generator().manual_seed(args.seed)
        with autocast_context(device, AMP_DTYPES[args.amp]):
            out = model.generate(prompt, args.sample_chars, temperature=0.8, generator=sample_gen)
        print("sample:")
        print(tokenizer.decode(out[0]))
    return losses


def main() -> None:
    train(parse_args())


if __name__ == "__main__":
    main()
