"""Random numbers in NKI kernels: ``nl.rand``, ``nl.random_seed``,
``nl.dropout`` and ``nisa.dropout`` (destination first, and the original
form returning a tile, ``neuronxcc.nki.isa.dropout``).

The kernels are written here in the style of NKI's reference pages
(awsdocs-neuron.readthedocs-hosted.com, nki/api/generated/
nki.language.rand.html, nki.language.random_seed.html,
nki.language.dropout.html, nki.isa.dropout.html) and run on neuron tensors
and on NumPy arrays (``nki.simulate``). What the pages promise is checked:
uniform values in [0, 1) (with statistical bounds), the same seed giving the
same values (the random_seed page's own example), elements zeroed with the
given probability and the others unchanged (no rescaling), one probability
per partition, the dtype rules of nki.isa.dropout; and the simulator's own
choices: a seed read when the kernel runs, a fresh state for each launch
without one, broken rules as NKIErrors naming the kernel line.
"""

import os

import ml_dtypes
import neuronxcc.nki.isa as lisa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from kernel_source import line_of

import torch_neuronx.nki as tnki
from torch_neuronx.nki import NKIError
from torch_neuronx.nki.kernel import compiled_for

HERE = os.path.basename(__file__)
RNG = np.random.default_rng(11)
SIGMAS = 6  # statistical bounds: a false failure about once in 10^8 runs

TORCH = {
    np.dtype(np.float32): torch.float32,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(np.int32): torch.int32,
}


def to_neuron(a: np.ndarray) -> torch.Tensor:
    if a.dtype == np.int32:
        return torch.from_numpy(np.ascontiguousarray(a)).to("neuron")
    t = torch.from_numpy(np.ascontiguousarray(a).astype(np.float32))
    return t.to(TORCH[a.dtype]).to("neuron")


def on(where, kernel, *args):
    """Runs `kernel` on neuron tensors or NumPy arrays; NumPy results."""
    if where == "numpy":
        out = nki.simulate(kernel)(*args)
        return out if isinstance(out, tuple) else (out,)
    dev = [to_neuron(a) if isinstance(a, np.ndarray) else a for a in args]
    out = kernel(*dev)
    out = out if isinstance(out, tuple) else (out,)
    res = []
    for t in out:
        assert t.device.type == "neuron"
        t = t.cpu()
        res.append((t.float() if t.dtype == torch.bfloat16 else t).numpy())
    return tuple(res)


WHERE = ["neuron", "numpy"]
DUMMY = np.zeros((1, 1), np.float32)


def check_uniform(u, bits=24):
    """u holds independent uniform values j / 2^bits in [0, 1)."""
    u = np.asarray(u, np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    n, m = u.size, 2.0**bits
    mean, var = (m - 1) / (2 * m), (m * m - 1) / (12 * m * m)
    assert abs(u.mean() - mean) < SIGMAS * np.sqrt(var / n), u.mean()
    # The sample variance's spread: (mu4 - sigma^4) / n, mu4 = 1/80.
    assert abs(u.var() - var) < SIGMAS * np.sqrt((1 / 80 - 1 / 144) / n), u.var()
    counts = np.histogram(u, bins=16, range=(0.0, 1.0))[0]
    chi2 = ((counts - n / 16) ** 2 / (n / 16)).sum()
    assert chi2 < 60, chi2  # 15 degrees of freedom: P(chi2 > 60) ~ 1e-7
    np.testing.assert_array_equal(u * m, np.floor(u * m))  # multiples of 2^-bits


# nl.rand: uniform values in [0, 1) -------------------------------------------------------
@nki.jit
def rand_kernel(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.rand((128, 512), dtype=a.dtype)  # the nl.rand page's example
    nl.store(out, value=x)
    return out


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(("dtype", "bits"), [(np.float32, 24), (ml_dtypes.bfloat16, 8)])
def test_rand_is_uniform_in_0_1(where, dtype, bits):
    (u,) = on(where, rand_kernel, np.zeros((1, 1), dtype))
    assert u.shape == (128, 512)
    check_uniform(u, bits)
    # Neighbouring values are uncorrelated, along partitions and along rows.
    c = u.astype(np.float64)
    c -= c.mean()
    for a, b in ((c[:, 1:], c[:, :-1]), (c[1:], c[:-1])):
        r = (a * b).mean() / c.var()
        assert abs(r) < SIGMAS / np.sqrt(a.size), r


@nki.jit
def rand_places(a):
    """Seeded: the stream into HBM (256 rows), into PSUM, and into SBUF."""
    hbm = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    two = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    psum = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    seed = nl.full((1, 1), 5, dtype=nl.uint32, buffer=nl.sbuf)
    nl.random_seed(seed)
    r = nl.rand((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(seed)
    top = nl.rand((128, 64), dtype=nl.float32)
    bottom = nl.rand((128, 64), dtype=nl.float32)
    nl.store(two[0:128, :], value=top)
    nl.store(two[128:256, :], value=bottom)
    nl.random_seed(seed)
    p = nl.rand((128, 64), dtype=nl.float32, buffer=nl.psum)
    nl.store(psum, value=p)
    nisa.dma_copy(dst=hbm, src=r)
    return hbm, two, psum


@pytest.mark.parametrize("where", WHERE)
def test_rand_in_hbm_and_psum_takes_the_stream_in_row_major_order(where):
    hbm, two, psum = on(where, rand_places, DUMMY)
    np.testing.assert_array_equal(hbm, two)
    np.testing.assert_array_equal(psum, two[0:128])
    assert hbm.min() >= 0 and hbm.max() < 1


# nl.random_seed: the same seed, the same values --------------------------------------------
@nki.jit
def seed_example(a):
    out_a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    out_b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    out_c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    # nki.language.random_seed -- same seed produces same values
    seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
    nl.random_seed(seed)
    a = nl.rand((128, 512), dtype=nl.float32)
    nl.random_seed(seed)
    b = nl.rand((128, 512), dtype=nl.float32)
    c = nl.rand((128, 512), dtype=nl.float32)  # the stream goes on
    nl.store(out_a, value=a)
    nl.store(out_b, value=b)
    nl.store(out_c, value=c)
    return out_a, out_b, out_c


@pytest.mark.parametrize("where", WHERE)
def test_the_same_seed_gives_the_same_values(where):
    a, b, c = on(where, seed_example, DUMMY)
    np.testing.assert_array_equal(a, b)  # the page's `assert nl.equal(a, b)`
    assert (a != c).mean() > 0.999
    check_uniform(np.concatenate([a, c]))
    # And in the next launch, and on the other kind of arguments.
    for w in WHERE:
        a2, _, c2 = on(w, seed_example, DUMMY)
        np.testing.assert_array_equal(a2, a)
        np.testing.assert_array_equal(c2, c)


@nki.jit
def seeded_from_input(seed_in):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    seed = nl.load(seed_in)  # a [1, 1] tile read when the kernel runs
    nl.random_seed(seed)
    nl.store(out, value=nl.rand((128, 256), dtype=nl.float32))
    return out


@nki.jit
def seeded_by_constant(a, value):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(value)
    nl.store(out, value=nl.rand((128, 256), dtype=nl.float32))
    return out


@pytest.mark.parametrize("where", WHERE)
def test_the_seed_is_read_when_the_kernel_runs(where):
    def run(v, dtype=np.int32):
        return on(where, seeded_from_input, np.full((1, 1), v, dtype))[0]

    first = run(42)
    np.testing.assert_array_equal(run(42), first)
    others = [run(v) for v in (43, 7, 0, -1)]
    for o in others:
        assert (o != first).mean() > 0.999
    # One trace served every seed: the value is data, not a trace constant.
    traces = {
        id(compiled_for(seeded_from_input, (), (np.full((1, 1), v, np.int32),), {})) for v in (1, 2)
    }
    assert len(traces) == 1
    # A Python integer is the same 32-bit seed as a tile holding it.
    np.testing.assert_array_equal(on(where, seeded_by_constant, DUMMY, 42)[0], first)
    np.testing.assert_array_equal(on(where, seeded_by_constant, DUMMY, -1)[0], others[-1])
    np.testing.assert_array_equal(on(where, seeded_by_constant, DUMMY, 2**32 - 1)[0], others[-1])


def test_a_float32_seed_tile_seeds_by_its_32_bits():
    bits = np.array([[0x42280000]], np.uint32)  # 42.0's bits
    as_float = nki.simulate(seeded_from_input)(bits.view(np.float32))
    np.testing.assert_array_equal(as_float, nki.simulate(seeded_from_input)(bits.view(np.int32)))


# Without a seed, each launch draws fresh values ---------------------------------------------
@pytest.mark.parametrize("where", WHERE)
def test_two_unseeded_launches_differ(where):
    (u,) = on(where, rand_kernel, DUMMY)
    (v,) = on(where, rand_kernel, DUMMY)
    assert (u != v).mean() > 0.999
    check_uniform(np.concatenate([u, v]))


# dropout: zero with probability prob, keep the rest unchanged ---------------------------------
@nki.jit
def isa_dropout(data, prob):
    out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=data)
    y = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=y, data=x, prob=prob)
    nisa.dma_copy(dst=out, src=y)
    return out


def data_of(dtype, shape=(128, 512)):
    if dtype == np.int32:
        # Integers past 2^24 (not exact in fp32) and negative ones.
        return RNG.integers(-(2**31), 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[x == 0] = 1.0
    return x.astype(dtype)


def check_dropped(y, x, prob, p_lo=None):
    """y is x with elements zeroed, about `prob` of them, the others equal."""
    x = np.asarray(x, np.float64) if x.dtype != np.int32 else x
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x[kept])
    n = y.size
    dropped = n - kept.sum()
    assert abs(dropped - n * prob) <= SIGMAS * np.sqrt(n * prob * (1 - prob)) + 1e-9, (
        dropped / n,
        prob,
    )


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32])
def test_dropout_zeroes_about_prob_of_the_elements(where, dtype):
    x = data_of(dtype)
    for prob in (0.0, 0.3, 1.0):
        (y,) = on(where, isa_dropout, x, prob)
        xs = x.astype(np.float32) if dtype == ml_dtypes.bfloat16 else x
        if prob == 0.0:
            np.testing.assert_array_equal(y, xs)  # everything kept, no rescaling
        elif prob == 1.0:
            assert not y.any()
        else:
            check_dropped(y, xs, prob)
            if dtype == np.int32:
                assert y.dtype == np.int32


@nki.jit
def per_partition_dropout(data, probs):
    out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    x = nl.load(data)
    p = nl.load(probs)  # (P, 1): one drop probability per partition
    y = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dropout(y, x, p)
    nl.store(out, value=y)
    return out


@pytest.mark.parametrize("where", WHERE)
def test_one_probability_per_partition(where):
    P, F = 128, 2048
    x = data_of(np.float32, (P, F))
    probs = (np.arange(P, dtype=np.float32) / (P - 1)).reshape(P, 1)
    (y,) = on(where, per_partition_dropout, x, probs)
    assert (y[0] == x[0]).all() and not y[-1].any()  # prob 0 and prob 1
    for p in range(P):
        check_dropped(y[p : p + 1], x[p : p + 1], float(probs[p, 0]))
    # In the per-partition form too, integer data keep their bits.
    xi = data_of(np.int32, (P, F))
    (yi,) = on(where, per_partition_dropout, xi, probs)
    assert yi.dtype == np.int32 and (yi[0] == xi[0]).all() and not yi[-1].any()
    kept = yi != 0
    np.testing.assert_array_equal(yi[kept], xi[kept])


@nki.jit
def language_and_legacy_dropout(data, rate_tile):
    """nl.dropout (a constant, a one-element tile) and the original isa form."""
    P, F = data.shape
    outs = [nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(3)]
    bf = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.load(data)
    r = nl.load(rate_tile)  # [1, 1]: one rate for every partition
    nl.store(outs[0], value=nl.dropout(x, 0.5))
    nl.store(outs[1], value=nl.dropout(x, r))
    nl.store(outs[2], value=lisa.dropout(x, 0.25))
    nl.store(bf, value=lisa.dropout(x, 0.0, dtype=nl.bfloat16))  # float data: any float dst
    return outs[0], outs[1], outs[2], bf


@pytest.mark.parametrize("where", WHERE)
def test_language_dropout_and_the_original_isa_form(where):
    x = data_of(np.float32, (128, 512))
    half, tile_rate, quarter, bf = on(
        where, language_and_legacy_dropout, x, np.full((1, 1), 0.75, np.float32)
    )
    check_dropped(half, x, 0.5)
    check_dropped(tile_rate, x, 0.75)
    check_dropped(quarter, x, 0.25)
    np.testing.assert_array_equal(bf, x.astype(ml_dtypes.bfloat16).astype(np.float32))


@nki.jit
def seeded_dropout(data):
    out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    u_out = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(data)
    nl.random_seed(1234)
    u = nl.rand(data.shape, dtype=nl.float32)
    nl.random_seed(1234)
    y = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dropout(y, x, 0.4)
    nl.store(out, value=y)
    nl.store(u_out, value=u)
    return out, u_out


@pytest.mark.parametrize("where", WHERE)
def test_dropout_drops_where_the_seeded_stream_is_below_prob(where):
    x = data_of(np.float32, (64, 300))
    y, u = on(where, seeded_dropout, x)
    np.testing.assert_array_equal(y, np.where(u < np.float32(0.4), 0, x))
    y2, _ = on(where, seeded_dropout, x)
    np.testing.assert_array_equal(y2, y)


# Definedness: rand and dropout write their whole destination; a seed must be written ------------
@nki.jit
def rand_part_then_store(a, case):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    if case == "whole":
        t[...] = nl.rand((128, 512), dtype=nl.float32)
    else:
        t[:, 0:256] = nl.rand((128, 256), dtype=nl.float32)
    nl.store(out, value=t)  # store
    return out


@nki.jit
def unwritten_seed(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    seed = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nl.random_seed(seed)  # unwritten
    nl.store(out, value=nl.rand((128, 64), dtype=nl.float32))
    return out


def test_definedness_of_random_values():
    (u,) = on("numpy", rand_part_then_store, DUMMY, "whole")
    check_uniform(u)
    with pytest.raises(NKIError, match="never written"):
        rand_part_then_store(DUMMY, "half")
    with pytest.raises(NKIError, match="never written") as info:
        unwritten_seed(DUMMY)
    assert info.value.lineno == line_of(unwritten_seed.fn, "# unwritten")


# Cost: dropout max(MIN_II, N) Vector cycles (NKI's estimate), rand the same, the seed MIN_II ----
@nki.jit
def one_each(a, n):
    out = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(3)
    x = nl.rand((128, n), dtype=nl.float32)
    y = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dropout(y, x, 0.5)
    nl.store(out, value=y)
    return out


def test_cost_is_max_min_ii_n_vector_cycles():
    hw = tnki.hardware_targets()["trn2"]
    for n, per_op in ((4096, 4096), (16, 64)):
        p = tnki.estimate(one_each, DUMMY, n)
        assert p.instructions["vector"] == 3
        cycles = 64 + 2 * per_op  # random_seed, rand, dropout
        assert p.busy_us["vector"] == pytest.approx(cycles / hw["vector_ghz"] / 1e3)


# Broken rules: NKIErrors at the kernel line ----------------------------------------------------


@nki.jit
def bad_random(a, case):
    P, F = a.shape
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    xi = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xi, src=a)
    y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    if case == "seed-shape":
        s = nl.full((2, 1), 1, dtype=nl.int32, buffer=nl.sbuf)
        nl.random_seed(s)  # seed-shape
    elif case == "seed-dtype":
        s = nl.full((1, 1), 1, dtype=nl.int16, buffer=nl.sbuf)
        nl.random_seed(s)  # seed-dtype
    elif case == "seed-hbm":
        nl.random_seed(a[0:1, 0:1])  # seed-hbm
    elif case == "seed-float":
        nl.random_seed(1.5)  # seed-float
    elif case == "seed-range":
        nl.random_seed(2**33)  # seed-range
    elif case == "rand-dtype":
        nl.rand((P, F), dtype=nl.int32)  # rand-dtype
    elif case == "prob-shape":
        p = nl.full((P, 2), 0.5, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(y, x, p)  # prob-shape
    elif case == "prob-partitions":
        p = nl.full((P // 2, 1), 0.5, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(y, x, p)  # prob-partitions
    elif case == "prob-single":
        p = nl.full((1, 1), 0.5, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(y, x, p)  # prob-single
    elif case == "prob-range":
        nisa.dropout(y, x, 1.5)  # prob-range
    elif case == "prob-int-tile":
        p = nl.full((P, 1), 0, dtype=nl.int32, buffer=nl.sbuf)
        nisa.dropout(y, x, p)  # prob-int-tile
    elif case == "int-data-bf16-prob":
        p = nl.full((P, 1), 0.5, dtype=nl.bfloat16, buffer=nl.sbuf)
        yi = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dropout(yi, xi, p)  # int-data-bf16-prob
    elif case == "int-data-float-out":
        nisa.dropout(y, xi, 0.5)  # int-data-float-out
    elif case == "legacy-int-dtype":
        lisa.dropout(xi, 0.5, dtype=nl.float32)  # legacy-int-dtype
    elif case == "dst-shape":
        nisa.dropout(y[:, 0 : F // 2], x, 0.5)  # dst-shape
    elif case == "rank":
        z = nl.ndarray((P, 2, 2, 2, F // 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(z, z, 0.5)  # rank
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize(
    ("case", "limit", "phrases"),
    [
        ("seed-shape", "shape", ["random_seed", "[2, 1]", "[1, 1]"]),
        ("seed-dtype", "dtype", ["random_seed", "int16", "32-bit"]),
        ("seed-hbm", "buffer", ["random_seed seed", "HBM"]),
        ("seed-float", "operand", ["seed 1.5 is not an integer"]),
        ("seed-range", "operand", ["does not fit in 32 bits"]),
        ("rand-dtype", "dtype", ["rand: dtype int32", "float type"]),
        ("prob-shape", "shape", ["prob is a tile of shape [128, 2]", "[128, 1]"]),
        ("prob-partitions", "shape", ["[64, 1]", "one probability per partition"]),
        ("prob-single", "shape", ["[1, 1]", "(data.shape[0], 1)"]),
        ("prob-range", "operand", ["prob 1.5 is not a probability"]),
        ("prob-int-tile", "dtype", ["prob is int32", "float type"]),
        ("int-data-bf16-prob", "dtype", ["prob is bfloat16", "int32 data", "float32"]),
        ("int-data-float-out", "dtype", ["output is float32", "int32 data"]),
        ("legacy-int-dtype", "dtype", ["output is float32", "int32 data"]),
        ("dst-shape", "shape", ["dst [128, 32] and data [128, 64] differ"]),
        ("rank", "shape", ["rank 5", "at most 4"]),
    ],
)
def test_broken_rules_name_the_kernel_line(case, limit, phrases):
    a = np.zeros((128, 64), np.float32)
    with pytest.raises(NKIError) as info:
        bad_random(a, case)
    e = info.value
    assert e.limit == limit, str(e)
    assert os.path.basename(e.filename) == HERE, str(e)
    assert e.lineno == line_of(bad_random.fn, f"# {case}"), str(e)
    for p in phrases:
        assert p in str(e), str(e)
