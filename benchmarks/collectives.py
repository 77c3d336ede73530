"""torch.distributed on neuron: all_reduce bandwidth and latency against gloo, and DDP.

Everything is measured in one run, side by side. Run from the repo root::

    python benchmarks/collectives.py            # full run, a few minutes
    python benchmarks/collectives.py --quick    # smoke check (world 2), under a minute

1. all_reduce (SUM, float32) for each world size in --worlds (default 2,4) and each
   message size in --sizes (default 4 B ... 256 MiB): backend ``neuron`` on neuron
   tensors (rank r on ``neuron:r``) and backend ``gloo`` on CPU tensors. Each
   (world, backend) pair is its own job: ``world`` fresh interpreters with torchrun's
   environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), launched by
   this script. Bus bandwidth follows NCCL's definition, busbw = algbw * 2(n-1)/n with
   algbw = bytes / time, in GB/s (1e9 bytes).
2. Single-thread memcpy bandwidth (``b.copy_(a)`` of a 64 MiB float32 CPU tensor,
   ``torch.set_num_threads(1)``, bytes copied / time), measured in this process before
   and after the jobs; the median of both is the reference for neuron busbw / memcpy.
3. DDP step time: an MLP of 2.1M parameters (8.4 MB) trained with MSE + SGD at one
   global batch (--batch, default 256), once in a single process on ``neuron:0`` and
   once as DDP with 2 ranks on backend ``neuron``, each rank half the batch, each in
   fresh processes. A step is zero_grad, forward, backward (with DDP's gradient
   all-reduce) and the optimizer step, on inputs already on the device.

Timing: after warm-up, one all_reduce is timed to pick the iteration count (the ranks
agree on the largest estimate, so they all run the same collectives), then --repeats
timed runs of that many back-to-back all_reduces; a run's time per op is the largest
over the ranks, and the median over the runs is reported. The neuron backend runs
collectives asynchronously on a communication stream, so each run ends with
``torch.neuron.synchronize()`` before the clock is read (and starts after one). Tensors
are zeros, so repeated SUMs neither overflow nor hit denormals.

Rounds: the whole sequence of jobs runs --rounds times (default 2), alternating the
order of neuron and gloo (and of the DDP jobs), so drift in the machine's speed falls on
both sides alike; the timed runs of all rounds are pooled before taking the median.
The "sprd" columns give slowest/fastest run, a gauge of the noise.

Threads: as torchrun does, every rank of a multi-rank job gets OMP_NUM_THREADS =
max(1, CPUs // world) unless OMP_NUM_THREADS is already set; the single-process DDP
baseline keeps all CPUs. On a machine with fewer CPUs than ranks (world 4 on 2 CPUs)
the ranks time-share the CPUs, and both backends suffer from it alike. A full run also
times the single process with OMP_NUM_THREADS=1 and prints DDP-2 against it for
reference: on a host busy with other work, two-thread kernels can be much slower than
one-thread ones (CPU tensors alike), which flatters the all-CPUs baseline.

Targets (from the issue): at 64 MiB, neuron busbw >= 10x gloo and >= 50% of memcpy;
4-byte latency neuron <= 0.5x gloo; DDP-2 step / single-process step <= 1.3. Rows
that miss one are marked MISS.

Every job is bounded in time (--job-timeout); a job past it is killed with its whole
process group and reported as such. Shared-memory segments (/dev/shm/tnx-*) that a
killed job leaves behind are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import torch

try:
    # Normally loaded by `import torch` via its backend entry point; explicit import
    # covers environments where autoloading is disabled.
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

KiB = 1 << 10
MiB = 1 << 20
FULL_SIZES = [4, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB]
QUICK_SIZES = [4, MiB, 64 * MiB]
MEMCPY_BYTES = 64 * MiB

TARGET_BW_VS_GLOO = 10.0  # at 64 MiB
TARGET_BW_VS_MEMCPY = 0.5  # at 64 MiB
TARGET_LAT_VS_GLOO = 0.5  # at 4 B
TARGET_DDP_RATIO = 1.3
TARGET_SIZE = 64 * MiB

RESULT_TAG = "RESULT "


# The neuron backend with a world's ranks split over two simulated hosts (--two-hosts).
TWO_HOSTS = "neuron@2hosts"


def fmt_size(n: int) -> str:
    for unit, div in (("MiB", MiB), ("KiB", KiB)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    t = text.strip().upper().replace(" ", "")
    for suffix, mult in (("KIB", KiB), ("MIB", MiB), ("GIB", 1 << 30), ("K", KiB), ("M", MiB)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t.removesuffix("B"))


def bus_factor(world: int) -> float:
    return 2 * (world - 1) / world


# ---------------------------------------------------------------------------
# Rank side (this script run with --worker ...)
# ---------------------------------------------------------------------------


class RankContext:
    def __init__(self, backend: str, timeout_s: float) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ["LOCAL_RANK"])
        if backend == "neuron":
            torch.neuron.set_device(local)
            self.device = torch.device("neuron", local)
        else:
            self.device = torch.device("cpu")
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))

    def sync(self) -> None:
        if self.device.type == "neuron":
            torch.neuron.synchronize()

    def agree_max(self, values: list[float]) -> list[float]:
        """Largest value over the ranks, elementwise (a collective: all ranks call it)."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.cpu().tolist()

    def align(self) -> None:
        """Ranks leave at about the same time, with nothing left queued."""
        self.agree_max([0.0])
        self.sync()

    def finish(self, payload: dict) -> None:
        if self.rank == 0:
            print(RESULT_TAG + json.dumps(payload), flush=True)
        self.dist.destroy_process_group()


def worker_allreduce(args: argparse.Namespace) -> None:
    ctx = RankContext(args.backend, args.pg_timeout)
    dist = ctx.dist
    rows = []
    for size in args.sizes:
        n = max(1, size // 4)
        t = torch.zeros(n, dtype=torch.float32, device=ctx.device)
        # Large messages warm up in one op (the calibration op below is a second one).
        for _ in range(args.warmup if size < 16 * MiB else min(args.warmup, 1)):
            dist.all_reduce(t)
        ctx.align()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        ctx.sync()
        (one,) = ctx.agree_max([time.perf_counter() - t0])
        iters = int(min(args.max_iters, max(1, round(args.target_s / max(one, 1e-7)))))
        per_op = []
        for _ in range(args.repeats):
            ctx.align()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            ctx.sync()
            per_op.append((time.perf_counter() - t0) / iters)
        rows.append({"bytes": n * 4, "iters": iters, "runs": ctx.agree_max(per_op)})
        del t
    ctx.finish({"rows": rows})


def build_mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    d, h = 512, 1024
    return torch.nn.Sequential(
        torch.nn.Linear(d, h),
        torch.nn.GELU(),
        torch.nn.Linear(h, h),
        torch.nn.GELU(),
        torch.nn.Linear(h, d),
    )


def time_steps(step, sync, args: argparse.Namespace) -> list[float]:
    for _ in range(args.ddp_warmup):
        step()
    out = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.ddp_steps):
            step()
        sync()
        out.append((time.perf_counter() - t0) / args.ddp_steps)
    return out


def make_step(model: torch.nn.Module, batch: int, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 512, generator=gen).to(device)
    y = torch.randn(batch, 512, generator=gen).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    return step


def worker_single(args: argparse.Namespace) -> None:
    torch.neuron.set_device(0)
    device = torch.device("neuron", 0)
    model = build_mlp(args.seed).to(device)
    step = make_step(model, args.batch, device, args.seed)
    per_step = time_steps(step, torch.neuron.synchronize, args)
    print(RESULT_TAG + json.dumps({"runs": per_step}), flush=True)


def worker_ddp(args: argparse.Namespace) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = RankContext("neuron", args.pg_timeout)
    if args.batch % ctx.world:
        raise SystemExit(f"--batch {args.batch} is not divisible by world {ctx.world}")
    model = DDP(build_mlp(args.seed).to(ctx.device))
    step = make_step(model, args.batch // ctx.world, ctx.device, args.seed + ctx.rank)
    ctx.finish({"runs": ctx.agree_max(time_steps(step, ctx.align, args))})


# ---------------------------------------------------------------------------
# Driver side
# ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


LIVE: list[subprocess.Popen] = []  # children of the running job, killed on any exit


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the rank and anything it started
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_job(
    worker_args: list[str],
    world: int,
    timeout: float,
    distributed: bool = True,
    threads: int | None = None,
    hosts: int = 1,
) -> tuple[dict | None, str]:
    """Runs `world` ranks of this script in worker mode; (rank 0's result, error text).

    `hosts` > 1 splits the ranks into that many simulated hosts (blocks of ranks).
    """
    port = free_port()
    procs, files = [], []
    default_threads = str(max(1, cpu_count() // world))
    try:
        for rank in range(world):
            env = dict(os.environ)
            if threads is not None:
                env["OMP_NUM_THREADS"] = str(threads)
            else:
                env.setdefault("OMP_NUM_THREADS", default_threads)
            if distributed:
                env.update(
                    RANK=str(rank),
                    LOCAL_RANK=str(rank),
                    WORLD_SIZE=str(world),
                    LOCAL_WORLD_SIZE=str(world),
                    MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port),
                )
                if hosts > 1:
                    # Ranks split into `hosts` blocks of "hosts" (host identities).
                    env["TORCH_NEURONX_HOST_ID"] = f"bench-host{rank * hosts // world}"
            # Files, not pipes: a rank that writes a lot must not block on a full pipe.
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            files.append((out, err))
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *worker_args],
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as a whole
            )
            procs.append(p)
            LIVE.append(p)
        deadline = time.monotonic() + timeout
        failed_at = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now > failed_at + 15):
                break
            time.sleep(0.05)
        timed_out = [i for i, p in enumerate(procs) if p.poll() is None]
    finally:
        for p in procs:
            kill_group(p)
            LIVE.remove(p)
    texts = []
    for out, err in files:
        out.seek(0)
        err.seek(0)
        texts.append((out.read(), err.read()))
        out.close()
        err.close()
    if timed_out:
        return None, f"ranks {timed_out} killed after the {timeout:.0f} s limit"
    bad = [i for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        i = bad[0]
        tail = texts[i][1].strip().splitlines()[-3:]
        return None, f"rank {i} exited with {procs[i].returncode}: " + " | ".join(tail)
    for line in texts[0][0].splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :]), ""
    return None, "rank 0 printed no result"


def memcpy_bandwidth(repeats: int, iters: int) -> list[float]:
    """Bytes/s of single-thread b.copy_(a), one figure per repeat."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.ones(MEMCPY_BYTES // 4, dtype=torch.float32)
        b = torch.zeros_like(a)  # both touched: no page faults in the timed copies
        for _ in range(3):
            b.copy_(a)
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                b.copy_(a)
            out.append(MEMCPY_BYTES * iters / (time.perf_counter() - t0))
        return out
    finally:
        torch.set_num_threads(before)


def shm_segments() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("tnx-")}
    except FileNotFoundError:
        return set()


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def gbps(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"


def usec(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.1f}"


def ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations (< 1 min)")
    p.add_argument(
        "--sizes",
        help="comma-separated message sizes, e.g. 4,4KiB,1MiB "
        "(default 4 B,4 KiB,64 KiB,1 MiB,16 MiB,64 MiB,256 MiB; --quick: 4 B,1 MiB,64 MiB)",
    )
    p.add_argument("--worlds", help="comma-separated world sizes (default 2,4; --quick: 2)")
    p.add_argument("--repeats", type=int, help="timed runs per job (default 5, --quick 3)")
    p.add_argument(
        "--rounds", type=int, help="alternating rounds of every job (default 2, --quick 1)"
    )
    p.add_argument(
        "--target-ms",
        type=float,
        help="time of one timed run, sets the iteration count (default 100, --quick 30)",
    )
    p.add_argument("--max-iters", type=int, default=2000, help="cap on iterations per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed all_reduces per size")
    p.add_argument("--batch", type=int, default=256, help="DDP global batch (default 256)")
    p.add_argument("--ddp-steps", type=int, help="timed steps per run (default 10, --quick 4)")
    p.add_argument("--ddp-warmup", type=int, help="untimed steps (default 3, --quick 2)")
    p.add_argument("--no-ddp", action="store_true", help="skip the DDP comparison")
    p.add_argument(
        "--two-hosts",
        action="store_true",
        help="also run neuron with the ranks of each world >= 4 split over two simulated "
        "hosts (shared memory within a host, gloo between hosts)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--job-timeout", type=float, help="seconds per job before it is killed (default 180)"
    )
    p.add_argument("--pg-timeout", type=float, default=120, help=argparse.SUPPRESS)
    # Worker modes (this script as one rank of a job).
    p.add_argument("--worker", choices=["allreduce", "single", "ddp"], help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--target-s", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    quick = args.quick
    args.repeats = args.repeats or (3 if quick else 5)
    args.ddp_steps = args.ddp_steps or (3 if quick else 10)
    args.rounds = args.rounds or (1 if quick else 2)
    args.ddp_warmup = args.ddp_warmup or (2 if quick else 3)
    if args.ddp_warmup < 1:
        p.error("--ddp-warmup must be >= 1")
    if args.sizes:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    else:
        args.sizes = QUICK_SIZES if quick else FULL_SIZES
    if args.worker:
        if isinstance(args.sizes, list) and args.target_s is None:
            args.target_s = (args.target_ms or 100) / 1e3
        {"allreduce": worker_allreduce, "single": worker_single, "ddp": worker_ddp}[args.worker](
            args
        )
        return 0

    worlds = [int(w) for w in (args.worlds or ("2" if quick else "2,4")).split(",") if w.strip()]
    ndev = torch.neuron.device_count()
    if any(w < 2 or w > ndev for w in worlds):
        p.error(f"world sizes must be in 2..{ndev} (neuron devices visible)")
    if any(s < 4 or s % 4 for s in args.sizes):
        p.error("sizes must be positive multiples of 4 bytes (float32 elements)")
    target_ms = args.target_ms or (30 if quick else 100)
    job_timeout = args.job_timeout or 180
    common = ["--repeats", str(args.repeats), "--seed", str(args.seed)]
    common += ["--pg-timeout", str(args.pg_timeout)]

    shm_before = shm_segments()
    t_start = time.monotonic()
    ncpu = cpu_count()
    print(
        f"torch {torch.__version__}, {ncpu} CPUs, {torch.neuron.device_count()} neuron devices; "
        f"ranks get OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'CPUs // world')}",
        flush=True,
    )
    print(
        f"all_reduce SUM float32: warmup {args.warmup} (1 from 16 MiB), "
        f"{args.repeats} timed runs of ~{target_ms:g} ms (<= {args.max_iters} iters) per job, "
        f"{args.rounds} round(s) of alternating jobs; a run's time is the max over ranks, "
        f"figures are medians of runs",
        flush=True,
    )

    mem_iters = 3 if quick else 10
    memcpy = memcpy_bandwidth(args.repeats, mem_iters)
    print(
        f"memcpy (1 thread, {fmt_size(MEMCPY_BYTES)} copy_): "
        f"{statistics.median(memcpy) / 1e9:.2f} GB/s (before the jobs)",
        flush=True,
    )

    # Rounds alternate the order of the jobs, so drift in the machine's speed (other
    # jobs on a shared host) falls on both sides alike; the runs of all rounds are pooled.
    runs: dict[tuple[int, str], dict[int, list[float]]] = {}
    errors: dict[tuple[int, str], str] = {}
    iters_used: dict[tuple[int, str, int], list[int]] = {}
    sizes_arg = ",".join(str(s) for s in args.sizes)
    for rnd in range(args.rounds):
        for world in worlds:
            order = ["neuron", "gloo"] if (rnd + world) % 2 == 0 else ["gloo", "neuron"]
            if args.two_hosts and world >= 4:
                order.append(TWO_HOSTS)
            for backend in order:
                t0 = time.monotonic()
                hosts = 2 if backend == TWO_HOSTS else 1
                wargs = ["--worker", "allreduce", "--backend", backend.split("@")[0]]
                wargs += ["--sizes", sizes_arg]
                wargs += ["--warmup", str(args.warmup), "--max-iters", str(args.max_iters)]
                wargs += ["--target-s", str(target_ms / 1e3), *common]
                res, err = run_job(wargs, world, job_timeout, hosts=hosts)
                took = f"{time.monotonic() - t0:.1f} s"
                tag = f"  round {rnd + 1} world {world} {backend:<13}:"
                if res is None:
                    errors[(world, backend)] = err
                    print(f"{tag} FAILED after {took}: {err}", flush=True)
                    continue
                for r in res["rows"]:
                    runs.setdefault((world, backend), {}).setdefault(r["bytes"], [])
                    runs[(world, backend)][r["bytes"]] += r["runs"]
                    iters_used.setdefault((world, backend, r["bytes"]), []).append(r["iters"])
                print(f"{tag} done in {took}", flush=True)

    ddp_runs: dict[str, list[float]] = {}
    ddp_errors: dict[str, str] = {}
    ddp_jobs = [("single", "single", 1, None), ("single-1t", "single", 1, 1)]
    ddp_jobs.append(("ddp2", "ddp", 2, None))
    if quick:
        del ddp_jobs[1]  # the 1-thread reference only in full runs
    if not args.no_ddp:
        dargs = ["--batch", str(args.batch), "--ddp-steps", str(args.ddp_steps)]
        dargs += ["--ddp-warmup", str(args.ddp_warmup), *common]
        for rnd in range(args.rounds):
            for name, mode, world, threads in ddp_jobs if rnd % 2 == 0 else ddp_jobs[::-1]:
                t0 = time.monotonic()
                res, err = run_job(
                    ["--worker", mode, *dargs], world, job_timeout, mode == "ddp", threads
                )
                took = f"{time.monotonic() - t0:.1f} s"
                if res is None:
                    ddp_errors[name] = err
                    print(f"  round {rnd + 1} DDP {name:<9}: FAILED after {took}: {err}")
                else:
                    ddp_runs.setdefault(name, []).extend(res["runs"])
                    print(f"  round {rnd + 1} DDP {name:<9}: done in {took}", flush=True)

    memcpy_after = memcpy_bandwidth(args.repeats, mem_iters)
    memcpy_bw = statistics.median(memcpy + memcpy_after)
    print(
        f"memcpy (1 thread, {fmt_size(MEMCPY_BYTES)} copy_): "
        f"{statistics.median(memcpy_after) / 1e9:.2f} GB/s (after the jobs); "
        f"reference {memcpy_bw / 1e9:.2f} GB/s",
        flush=True,
    )

    # ---- tables ----
    def median_of(key: tuple[int, str], size: int) -> float | None:
        xs = runs.get(key, {}).get(size)
        return statistics.median(xs) if xs else None

    def spread_of(key: tuple[int, str], size: int) -> str:
        xs = runs.get(key, {}).get(size)
        return f"{max(xs) / min(xs):.2f}" if xs else "-"

    def iters_of(key: tuple[int, str], size: int) -> str:
        its = iters_used.get((*key, size))
        return "-" if not its else str(its[0]) if len(set(its)) == 1 else f"{min(its)}-{max(its)}"

    misses = []
    for world in worlds:
        kn, kg = (world, "neuron"), (world, "gloo")
        print()
        print(
            f"== all_reduce SUM float32, world {world}: time per op (us), "
            f"busbw = algbw * {bus_factor(world):.2f} (GB/s), spread = slowest/fastest run"
        )
        for key in (kn, kg):
            if key in errors:
                print(f"   {key[1]} failed in a round: {errors[key]}")
        head = (
            f"{'size':>9} | {'neuron us':>10} {'busbw':>6} {'iters':>7} {'sprd':>5} | "
            f"{'gloo us':>10} {'busbw':>6} {'iters':>7} {'sprd':>5} | "
            f"{'bw n/g':>6} | {'n/memcpy':>8}"
        )
        print(head)
        print("-" * len(head))
        for size in args.sizes:
            nt, gt = median_of(kn, size), median_of(kg, size)
            nbw = size / nt * bus_factor(world) if nt else None
            gbw = size / gt * bus_factor(world) if gt else None
            mark = ""
            if size == TARGET_SIZE and nbw is not None:
                ok_g = gbw is not None and nbw >= TARGET_BW_VS_GLOO * gbw
                ok_m = nbw >= TARGET_BW_VS_MEMCPY * memcpy_bw
                mark = (
                    f"  vs gloo {verdict(ok_g)} (>= {TARGET_BW_VS_GLOO:g}), "
                    f"vs memcpy {verdict(ok_m)} (>= {TARGET_BW_VS_MEMCPY:.0%})"
                )
                if not ok_g:
                    misses.append(f"world {world} {fmt_size(size)} busbw vs gloo")
                if not ok_m:
                    misses.append(f"world {world} {fmt_size(size)} busbw vs memcpy")
            mpct = "-" if nbw is None else f"{nbw / memcpy_bw:.1%}"
            print(
                f"{fmt_size(size):>9} | {usec(nt):>10} {gbps(nbw):>6} {iters_of(kn, size):>7} "
                f"{spread_of(kn, size):>5} | {usec(gt):>10} {gbps(gbw):>6} "
                f"{iters_of(kg, size):>7} {spread_of(kg, size):>5} | "
                f"{ratio(nbw, gbw):>6} | {mpct:>8}{mark}"
            )
        k2 = (world, TWO_HOSTS)
        if k2 in runs or k2 in errors:
            print(
                f"  neuron with ranks 0-{world // 2 - 1} and {world // 2}-{world - 1} on two "
                f"simulated hosts (shared memory within, gloo between):"
            )
            if k2 in errors:
                print(f"   failed in a round: {errors[k2]}")
            for size in args.sizes:
                ht, gt = median_of(k2, size), median_of(kg, size)
                hbw = size / ht * bus_factor(world) if ht else None
                gbw = size / gt * bus_factor(world) if gt else None
                print(
                    f"{fmt_size(size):>9} | {usec(ht):>10} {gbps(hbw):>6} "
                    f"{iters_of(k2, size):>7} {spread_of(k2, size):>5} | vs gloo {ratio(hbw, gbw)}"
                )
        smallest = min(args.sizes)
        nt, gt = median_of(kn, smallest), median_of(kg, smallest)
        if nt and gt:
            ok = nt <= TARGET_LAT_VS_GLOO * gt
            if smallest == 4 and not ok:
                misses.append(f"world {world} 4 B latency")
            tgt = f" (target <= {TARGET_LAT_VS_GLOO:g}) {verdict(ok)}" if smallest == 4 else ""
            print(
                f"latency {fmt_size(smallest)}, world {world}: neuron {nt * 1e6:.1f} us, "
                f"gloo {gt * 1e6:.1f} us, neuron/gloo {nt / gt:.2f}{tgt}"
            )

    if not args.no_ddp:
        nparams = sum(q.numel() for q in build_mlp(args.seed).parameters())
        print()
        print(
            f"== DDP step: MLP 512-1024-1024-512 GELU ({nparams / 1e6:.2f}M params, "
            f"{nparams * 4 / 1e6:.1f} MB fp32), MSE + SGD, global batch {args.batch}; "
            f"{args.ddp_steps} steps per run, median of runs"
        )
        for name, label in (
            ("single", f"1 process, neuron:0, batch {args.batch}, OMP threads = all CPUs"),
            ("single-1t", f"1 process, neuron:0, batch {args.batch}, OMP threads = 1"),
            ("ddp2", f"DDP 2 ranks (neuron), batch {args.batch // 2}/rank"),
        ):
            if not any(name == job[0] for job in ddp_jobs):
                continue
            xs = ddp_runs.get(name)
            fig = f"{statistics.median(xs) * 1e3:8.2f} ms/step" if xs else "-"
            fail = f"  (failed: {ddp_errors[name]})" if name in ddp_errors else ""
            print(f"   {label:<62} {fig}{fail}")
        if ddp_runs.get("single") and ddp_runs.get("ddp2"):
            s = statistics.median(ddp_runs["single"])
            d = statistics.median(ddp_runs["ddp2"])
            ok = d / s <= TARGET_DDP_RATIO
            if not ok:
                misses.append("DDP-2 step ratio")
            print(
                f"ratio DDP-2 / single (all CPUs): {d / s:.2f} "
                f"(target <= {TARGET_DDP_RATIO:g}) {verdict(ok)}"
            )
            if ddp_runs.get("single-1t"):
                s1 = statistics.median(ddp_runs["single-1t"])
                print(f"ratio DDP-2 / single (1 thread): {d / s1:.2f} (for reference)")

    # ---- cleanup ----
    left = shm_segments() - shm_before
    if left:
        removed = 0
        try:
            from torch_neuronx.distributed import cleanup_stale_shared_memory

            removed = cleanup_stale_shared_memory()
        except Exception as e:  # report, never fail the run on cleanup
            print(f"cleanup of shared memory failed: {e}")
        still = shm_segments() - shm_before
        print(f"shared memory: {len(left)} segment(s) left by jobs, {removed} removed", end="")
        print(f", still there: {sorted(still)}" if still else "")
    print()
    failed = len(errors) + len(ddp_errors)
    print(f"misses: {', '.join(misses) if misses else 'none'}", end="")
    print(f"; {failed} job(s) FAILED, their figures are missing" if failed else "")
    print(f"total time {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for child in list(LIVE):
            kill_group(child)
