"""The validation table (docs/profiling.md, "Validation against published
figures"): every row's estimate is recomputed by the project's own cost
models and must equal the table in the docs, so the table cannot drift from
the model; the table has at least ten published rows, each with its source.

Regenerate the docs table after a model change with
``python -m torch_neuronx.estimate.validation --write-docs docs/profiling.md``.
"""

from __future__ import annotations

import io
import math
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from torch_neuronx.estimate import validation as V
from torch_neuronx.estimate.published_figures import FIGURES

DOCS = Path(__file__).resolve().parents[1] / "docs" / "profiling.md"


@pytest.fixture(scope="module")
def rows():
    # Every row, estimated once for the module: the NKI rows (the tutorial
    # matmuls at their published size take ~30 s) in a second process while
    # this one makes the planning runs (~30 s, shared by the rows reading the
    # same run).
    return V.compute(jobs=2)


def test_figures_are_published_rows_with_sources():
    names = [f.name for f in FIGURES]
    assert len(names) == len(set(names))
    assert len(FIGURES) >= 10
    for f in FIGURES:
        assert f.source.startswith("https://"), f.name
        assert len(f.quote) > 10, f.name
        assert f.target in ("trn1", "trn2", "trn3"), f.name
        assert f.unit in ("us", "ms", "s"), f.name
        assert f.published > 0 and math.isfinite(f.published), f.name
        assert f.spec["kind"] in ("nki", "collective", "model"), f.name


def test_at_least_ten_rows_are_estimated(rows):
    estimated = [r for r in rows if r.ours is not None]
    assert len(estimated) >= 10, [(r.figure.name, r.error) for r in rows if r.ours is None]
    for r in estimated:
        assert r.ours > 0 and math.isfinite(r.ours), r.figure.name


def test_docs_table_equals_the_recomputed_table(rows):
    table = V.docs_table(str(DOCS))
    assert table == V.markdown(rows), (
        "docs/profiling.md's validation table differs from the estimates; regenerate it with "
        "python -m torch_neuronx.estimate.validation --write-docs docs/profiling.md"
    )
    # and the table parsed back: one line per row, ours / published as printed
    body = [line for line in table.splitlines()[2:] if line.startswith("| `")]
    assert len(body) == len(rows)
    for line, r in zip(body, rows, strict=True):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert cells[0] == f"`{r.figure.name}`"
        assert cells[3] == f"{V.fmt(r.figure.published)} {r.figure.unit}"
        if r.ours is not None:
            assert cells[4] == f"{V.fmt(r.ours)} {r.figure.unit}"
            assert cells[5].split()[0] == f"{r.ratio:.2f}"


def test_ratio_is_ours_over_published(rows):
    r = next(r for r in rows if r.ours is not None)
    assert r.ratio == pytest.approx(r.ours / r.figure.published)
    assert r.within == (abs(r.ratio - 1) <= V.TOLERANCE)


def test_cli_prints_selected_rows():
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        V.main(["--markdown", "--rows", "nki-mamba-v1-c256-s512"])
    lines = out.getvalue().splitlines()
    assert lines[0] == V.HEADER.splitlines()[0]
    assert len(lines) == 3 and "`nki-mamba-v1-c256-s512`" in lines[2]
    with pytest.raises(KeyError):
        V.compute(["no-such-row"])


def _mamba_reference(delta, u, A, B, C):
    decay = torch.exp(delta[:, :, None, :] * A[None, :, :, None])
    dbu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    h = torch.zeros(decay.shape[:-1])
    out = torch.empty_like(delta)
    for i in range(delta.shape[-1]):
        h = decay[..., i] * h + dbu[..., i]
        out[..., i] = (h * C[:, None, :, i]).sum(-1)
    return out


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_mamba_kernels_compute_the_tutorial_layer(version):
    from torch_neuronx.estimate import validation_kernels as vk

    g = torch.Generator().manual_seed(0)
    b, c, s, n = 1, 128, 1024, 2
    delta = torch.rand(b, c, s, generator=g) * 0.1
    u = torch.rand(b, c, s, generator=g)
    A = -torch.rand(c, n, generator=g)
    B = torch.rand(b, n, s, generator=g)
    C = torch.rand(b, n, s, generator=g)
    out = vk.MAMBA_TUTORIAL[version](delta, u, A, B, C)
    ref = _mamba_reference(delta, u, A, B, C)
    assert (out - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_rmsnorm_quant_kernel_computes_rmsnorm_and_fp8():
    from torch_neuronx.estimate import validation_kernels as vk

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1024, generator=g).to(torch.bfloat16)
    gamma = torch.randn(1, 1024, generator=g).to(torch.bfloat16)
    q, scale = vk.rmsnorm_quant(x, gamma)
    xf, gf = x.float(), gamma.float()
    normed = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6) * gf
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (256, 1)
    torch.testing.assert_close(scale, normed.abs().amax(-1, keepdim=True) / 240, rtol=1e-2, atol=0)
    # fp8 e4m3 keeps 3 mantissa bits: within 1/16 of each value's magnitude
    err = (q.float() * scale - normed).abs()
    assert (err <= normed.abs() / 16 + scale).all()
