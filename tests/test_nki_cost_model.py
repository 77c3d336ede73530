"""The cost model's estimates as users read them: profiles of launches,
nki.benchmark / estimate on tensor specs, and the properties that make the
numbers trustworthy (more work costs more, independent engines overlap,
dependencies serialise, trn1 and trn2 differ by their clocks)."""

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.typing as nt
import nki
import nki.language as nl
import numpy as np
import pytest

import torch_neuronx.nki as tnki


@nki.jit
def exp_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128 : (i + 1) * 128], value=nl.exp(nl.load(a[i * 128 : (i + 1) * 128])))
    return out


@nki.jit
def matmuls(a, n):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.load(a[0:128, 0:128])
    mv = nl.load(a[0:128, :])
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for _ in nl.affine_range(n):
        acc += lisa.nc_matmul(st, mv)
    nl.store(out, value=nl.copy(acc))
    return out


def spec(*shape, dtype=nl.bfloat16):
    return nt.tensor[list(shape), dtype]


def test_profile_of_a_launch():
    exp_rows(np.ones((512, 256), np.float32))
    p = exp_rows.last_profile
    assert p.kernel == "exp_rows" and p.target == "trn2"
    assert p.instructions["dma"] == 8 and p.instructions["scalar"] == 4
    assert p.dma_bytes == 2 * 512 * 256 * 4
    assert p.sbuf_high_water_bytes >= 256 * 4 and p.psum_high_water_bytes == 0
    assert 0 < p.busy_us["scalar"] <= p.total_us
    assert all(0 <= v <= 100 for v in p.busy_percent.values())
    text = str(p)
    assert "exp_rows on trn2" in text and "scalar" in text and "SBUF high water" in text


def test_more_work_costs_more_and_engines_overlap():
    small = tnki.estimate(exp_rows, spec(256, 512))
    big = tnki.estimate(exp_rows, spec(2048, 512))
    assert big.total_us > 4 * small.total_us
    # Loads and stores of different row blocks overlap each other (16 DMA
    # queues) and the exps: close to the busiest engine, far from serial.
    serial = sum(big.busy_us.values()) + big.instructions["dma"] * 2.0  # + latency
    assert big.total_us < 1.3 * max(big.busy_us.values())
    assert big.total_us < 0.5 * serial


def test_dependent_matmuls_serialise_on_the_tensor_engine():
    one = tnki.estimate(matmuls, spec(128, 512), 1)
    ten = tnki.estimate(matmuls, spec(128, 512), 10)
    assert ten.instructions["tensor"] == 10
    assert ten.matmul_flops == 10 * 2 * 128 * 128 * 512
    # bf16 moving tile of 512 columns: max(min(64, 128), 512) cycles at 2.4 GHz.
    assert ten.busy_us["tensor"] == pytest.approx(10 * 512 / 2.4e3, rel=1e-6)
    assert ten.total_us - one.total_us == pytest.approx(9 * 512 / 2.4e3, rel=1e-3)


def test_fp32_matmuls_take_four_passes():
    bf = tnki.estimate(matmuls, spec(128, 512), 4)
    fp = tnki.estimate(matmuls, spec(128, 512, dtype=nl.float32), 4)
    assert fp.busy_us["tensor"] == pytest.approx(4 * bf.busy_us["tensor"])


def test_trainium1_parameters():
    t2 = tnki.estimate(matmuls, spec(128, 512), 8)
    t1 = tnki.estimate(matmuls, spec(128, 512), 8, target="trn1")
    assert t1.target == "trn1"
    assert t1.busy_us["tensor"] == pytest.approx(t2.busy_us["tensor"] * 2.4 / 2.8)
    with pytest.raises(ValueError, match=r"unknown target 'trn9' \(valid: trn1, trn2, trn3\)"):
        tnki.estimate(matmuls, spec(128, 512), 8, target="trn9")


def test_targets_come_from_the_runtime_table():
    table = tnki.hardware_targets()
    assert list(table) == ["trn1", "trn2", "trn3"]
    assert tnki.default_target() == "trn2"
    assert tnki.estimate(matmuls, spec(128, 512), 8).target == "trn2"
    # Each target's estimate follows its own clocks (NeuronCore-v4's Tensor
    # engine runs at NeuronCore-v3's 2.4 GHz).
    t2 = tnki.estimate(matmuls, spec(128, 512), 8)
    for name, hw in table.items():
        p = tnki.estimate(matmuls, spec(128, 512), 8, target=name)
        assert p.target == name
        assert p.busy_us["tensor"] == pytest.approx(
            t2.busy_us["tensor"] * table["trn2"]["tensor_ghz"] / hw["tensor_ghz"]
        )


def test_benchmark_result_in_nki_form():
    bench = nki.benchmark(warmup=2, iters=3)(exp_rows)
    assert bench(spec(1024, 512, dtype=nl.float32)) is None  # specs: nothing runs
    lat = bench.benchmark_result.nc_latency
    assert lat.get_latency_percentile(50) == lat.get_latency_percentile(99) > 0
    a = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    out = bench(a)  # with data it also runs
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-6)


def test_specs_cannot_be_run():
    with pytest.raises(tnki.NKIError, match="no data"):
        exp_rows(spec(256, 512))
