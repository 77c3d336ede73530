"""Layouts neuron tensors do not have are refused at the op, never returned as garbage.

Neuron tensors are dense and strided. Converting one to a sparse, mkldnn or other
layout raises NotImplementedError at the call, naming the op and the layout,
before anything is written; the device stays usable. Output shapes of the
unreduced margin losses match the CPU's for 0-d and 1-d inputs.
"""

import pytest
import torch
import torch.nn.functional as F

DEV = "neuron"

CONVERSIONS = {
    "to_sparse": (lambda x: x.to_sparse(), "torch.sparse_coo"),
    "to_sparse_csr": (lambda x: x.to_sparse_csr(), "torch.sparse_csr"),
    "to_sparse_csc": (lambda x: x.to_sparse_csc(), "torch.sparse_csc"),
    "to_sparse_bsr": (lambda x: x.to_sparse_bsr((1, 1)), "torch.sparse_bsr"),
    "to_sparse_bsc": (
        lambda x: x.to_sparse(layout=torch.sparse_bsc, blocksize=(1, 1)),
        "torch.sparse_bsc",
    ),
    "to_mkldnn": (lambda x: x.to_mkldnn(), "torch._mkldnn"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_conversion_to_other_layout_raises_at_the_call(name):
    convert, layout = CONVERSIONS[name]
    x = torch.randn(4, 4, device=DEV)
    before = x.cpu()
    with pytest.raises(NotImplementedError, match=layout.replace(".", r"\.")):
        convert(x)
    # Nothing pending, nothing written, the device still works.
    torch.neuron.synchronize()
    assert torch.equal(x.cpu(), before)
    assert torch.equal((x + 1).cpu(), before + 1)


def test_sparse_factory_on_neuron_is_an_error():
    i = torch.tensor([[0, 1], [1, 0]])
    v = torch.tensor([1.0, 2.0])
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.sparse_coo_tensor(i, v, (2, 2), device=DEV)
    torch.neuron.synchronize()


@pytest.mark.parametrize(
    "shape, target",
    [((), [0]), ((3,), 0), ((3,), [2]), ((2, 3), [1, 0])],
    ids=["0-dim", "1-dim-0-dim-target", "1-dim-1-element-target", "2-dim"],
)
def test_multi_margin_loss_unreduced_shape_matches_cpu(shape, target):
    # The loss is 0-dim for a 0-dim target, [1] for a [1] target (a 1-dim input).
    x = torch.randn(shape)
    target = torch.tensor(target) if shape else torch.tensor(0)
    expected = F.multi_margin_loss(x, target, reduction="none")
    actual = F.multi_margin_loss(x.to(DEV), target.to(DEV), reduction="none")
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected)
    # The out= overload (its reduction is not its last argument).
    out = torch.empty(0, device=DEV)
    torch.ops.aten.multi_margin_loss.out(x.to(DEV), target.to(DEV), 1, 1, None, 0, out=out)
    assert out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_multilabel_margin_loss_unreduced_shape_matches_cpu(shape):
    x = torch.randn(shape)
    target = torch.zeros(shape, dtype=torch.long)
    if len(shape) >= 1:
        target[..., 0] = 1
        target[..., 1] = -1
    expected = F.multilabel_margin_loss(x, target, reduction="none")
    actual = F.multilabel_margin_loss(x.to(DEV), target.to(DEV), reduction="none")
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected)
