"""SPMD launch grids in every form the NKI docs show: plain ints, tuples and
lists, ``nl.nc(k)``, ``nl.spmd_dim(n, nl.nc(k))`` / ``nl.spmd_dim(nl.nc(k), n)``
and their ``n * nl.nc(k)`` sugar; ``nl.program_id``, ``nl.num_programs`` and
``nl.program_ndim`` checked against a reference enumeration of the grid."""

import itertools
import math

import neuronxcc.nki.language as nl
import numpy as np
import pytest
import torch
from neuronxcc import nki

from torch_neuronx import wrap_nki
from torch_neuronx.nki import NKIError, simulate_kernel

RNG = np.random.default_rng(11)


# The multi-core tensor-add tutorial's pattern: the kernel tiles [128, 512]
# by program id; the caller shards the first grid axis over two cores.
@nki.jit
def tile_add_kernel(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    offset_i_x = nl.program_id(0) * 128
    offset_i_y = nl.program_id(1) * 512
    ix_, iy_ = nl.mgrid[0:128, 0:512]
    ix = offset_i_x + ix_
    iy = offset_i_y + iy_
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=a_tile + b_tile)
    return c_output


def tensor_add_two_cores(a_input, b_input):
    # 128 rows per instance, two cores: each step of grid_x covers 256 rows.
    grid_x = a_input.shape[0] // (128 * 2)
    grid_y = a_input.shape[1] // 512
    return tile_add_kernel[nl.spmd_dim(grid_x, nl.nc(2)), grid_y](a_input, b_input)


def test_multi_core_tensor_add_computes_the_whole_output_numpy():
    a = RNG.random((512, 2048)).astype(np.float16)
    b = RNG.random((512, 2048)).astype(np.float16)
    out = tensor_add_two_cores(a, b)
    assert np.allclose(out, a + b, atol=1e-4, rtol=1e-2)


def test_multi_core_tensor_add_on_neuron_tensors_and_through_wrap_nki():
    a = torch.rand(512, 1024, device="neuron")
    b = torch.rand(512, 1024, device="neuron")
    torch.testing.assert_close(tensor_add_two_cores(a, b).cpu(), (a + b).cpu())
    grid = [nl.spmd_dim(a.shape[0] // 256, nl.nc(2)), a.shape[1] // 512]
    torch.testing.assert_close(wrap_nki(tile_add_kernel)[grid](a, b).cpu(), (a + b).cpu())


# The spmd_dim doc's kernel: one element per instance, by integer index.
@nki.jit
def copy_by_instance(a):
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    nl.store(b[i, j], nl.load(a[i, j]))
    return b


FOUR_BY_TWO = {
    "ints": (4, 2),
    "list": [4, 2],
    "nested tuple": ((4, 2),),
    "nc outer (spmd_dim)": (nl.spmd_dim(nl.nc(2), 2), 2),
    "nc outer (sugar)": (nl.nc(2) * 2, 2),
    "nc inner (spmd_dim)": (nl.spmd_dim(2, nl.nc(2)), 2),
    "nc inner (sugar)": (2 * nl.nc(2), 2),
    "nested spmd_dim": (nl.spmd_dim(nl.spmd_dim(2, 1), nl.nc(2)), nl.spmd_dim(2)),
}


@pytest.mark.parametrize("grid", FOUR_BY_TWO.values(), ids=FOUR_BY_TWO.keys())
def test_every_grid_form_of_four_by_two_runs_all_eight_instances(grid):
    src = RNG.random((4, 2, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(copy_by_instance[grid](src), src)


@nki.jit
def record_ids(x):
    # out[p0, p1] = an id code per instance, written by that instance only.
    out = nl.ndarray(
        (nl.num_programs(0), nl.num_programs(1)), dtype=nl.float32, buffer=nl.shared_hbm
    )
    i, j = nl.program_id(0), nl.program_id(1)
    code = i * 100 + j + 10000 * nl.num_programs() + 1000 * nl.program_ndim()
    nl.store(out[i : i + 1, j : j + 1], value=nl.full((1, 1), float(code), nl.float32))
    return out


def _reference_ids(shape):
    ref = np.zeros(shape, np.float32)
    for i, j in itertools.product(*(range(s) for s in shape)):
        ref[i, j] = i * 100 + j + 10000 * math.prod(shape) + 1000 * len(shape)
    return ref


@pytest.mark.parametrize(
    "grid, shape",
    [
        ((nl.spmd_dim(3, nl.nc(2)), 5), (6, 5)),
        ((nl.spmd_dim(nl.nc(2), 3), 2), (6, 2)),
        ((nl.nc(2), 3), (2, 3)),
        ((3 * nl.nc(2), nl.nc(2)), (6, 2)),
        ([2, 7], (2, 7)),
    ],
)
def test_program_id_and_num_programs_cover_the_whole_grid(grid, shape):
    x = np.zeros((1, 1), np.float32)
    np.testing.assert_array_equal(record_ids[grid](x), _reference_ids(shape))
    t = record_ids[grid](torch.zeros(1, 1, device="neuron"))
    np.testing.assert_array_equal(t.cpu().numpy(), _reference_ids(shape))


def test_num_programs_of_several_axes_and_a_grid_without_dimensions():
    @nki.jit
    def sizes(x):
        out = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        n0, n1 = nl.num_programs((0, 1)) if nl.program_ndim() == 2 else (1, 1)
        for k, v in enumerate((n0, n1, nl.program_ndim())):
            nl.store(out[0:1, k : k + 1], value=nl.full((1, 1), float(v), nl.float32))
        return out

    x = np.zeros((1, 1), np.float32)
    np.testing.assert_array_equal(sizes[nl.spmd_dim(2, nl.nc(2)), 3](x), [[4, 3, 2]])
    np.testing.assert_array_equal(simulate_kernel(sizes, x), [[1, 1, 0]])


@pytest.mark.parametrize(
    "make_grid, message",
    [
        (lambda: 0, "launch grid sizes must be positive, got 0"),
        (lambda: (2, -1), "launch grid sizes must be positive, got -1"),
        (lambda: 2.5, r"launch grid takes positive integers.*got 2.5 \(float\)"),
        (lambda: (2, "3"), r"launch grid takes positive integers.*got '3'"),
        (lambda: (), "a launch grid needs at least one dimension"),
        (lambda: nl.nc(0), "nl.nc sizes must be positive, got 0"),
        (lambda: nl.spmd_dim(2, None), r"nl.spmd_dim takes positive integers.*got None"),
        (lambda: nl.spmd_dim(), "nl.spmd_dim needs at least one size"),
    ],
)
def test_bad_grids_are_clear_errors(make_grid, message):
    with pytest.raises(NKIError, match=message):
        copy_by_instance[make_grid()]


def test_program_id_beyond_the_grid_is_an_error_naming_the_line():
    @nki.jit
    def third_axis(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x) + nl.program_id(2))
        return out

    with pytest.raises(NKIError, match=r"program_id\(2\): the launch grid has 2 dimensions"):
        third_axis[nl.spmd_dim(1, nl.nc(2)), 2](np.zeros((1, 1), np.float32))
