"""torch.neuron graphs: device work captured once, replayed as one work item
(torch.cuda.CUDAGraph's contract), checked against the same ops on CPU."""

import gc

import pytest
import torch
from device_trace import trace_labels

DEV = "neuron"


def block(x, w):
    """A few ops of different kinds: matmul, element-wise, a norm, a reduction."""
    h = torch.nn.functional.layer_norm((x @ w).relu() + 1, (w.shape[1],))
    return h.softmax(-1).sum(0), h


def test_replay_recomputes_from_the_inputs_in_place():
    x = torch.randn(16, 32, device=DEV)
    w = torch.randn(32, 32, device=DEV)
    block(x, w)  # warm-up, as with CUDA graphs
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        s, h = block(x, w)
    assert g.num_steps > 0
    for _ in range(3):
        xc = torch.randn(16, 32)
        x.copy_(xc)
        g.replay()
        rs, rh = block(xc, w.cpu())
        torch.testing.assert_close(s.cpu(), rs, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(h.cpu(), rh, rtol=1e-4, atol=1e-5)


def test_a_replay_is_one_work_item():
    x = torch.randn(8, 8, device=DEV)
    y = None
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        y = ((x + 1) * 2).sin().cos()
    labels = trace_labels(lambda: [g.replay() for _ in range(3)])
    assert labels == [f"neuron graph {g._graph.id}"] * 3, labels
    torch.testing.assert_close(y.cpu(), ((x.cpu() + 1) * 2).sin().cos())


def test_graph_memory_is_not_reused_while_the_graph_lives():
    x = torch.randn(64, 64, device=DEV)
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        t = x * 3  # an intermediate, freed before the capture ends
        out = t + 1
        del t
    gc.collect()
    # Eager tensors allocated now must not get the intermediate's memory...
    others = [torch.full((64, 64), 7.0, device=DEV) for _ in range(4)]
    g.replay()
    # ...or the replay would have overwritten them.
    for o in others:
        assert torch.equal(o.cpu(), torch.full((64, 64), 7.0))
    torch.testing.assert_close(out.cpu(), x.cpu() * 3 + 1)


def test_reset_gives_the_memory_back():
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    x = torch.randn(256, 256, device=DEV)
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        y = (x * 2).exp()
    del y
    gc.collect()
    torch.neuron.synchronize()
    held = torch.neuron.memory_allocated()
    assert held >= before + 2 * 256 * 256 * 4  # x, and the graph's two buffers
    g.reset()
    assert not g._graph.captured
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before + 256 * 256 * 4  # x only
    with pytest.raises(RuntimeError, match="not been captured"):
        g.replay()


def test_replay_on_another_stream():
    x = torch.randn(8, 8, device=DEV)
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        y = x.exp()
    s = torch.neuron.Stream()
    s.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(s):
        g.replay()
    torch.neuron.current_stream().wait_stream(s)
    torch.testing.assert_close(y.cpu(), x.cpu().exp())
    g.reset()


@pytest.mark.parametrize(
    "what, body",
    [
        ("a host wait", lambda x: x.sum().item()),
        ("a copy to the host", lambda x: x.cpu()),
        ("synchronize", lambda x: torch.neuron.synchronize()),
        ("a random op", lambda x: torch.rand(3, device=DEV)),
        ("an event", lambda x: torch.neuron.Event().record()),
    ],
)
def test_what_cannot_be_captured_fails_the_capture_clearly(what, body):
    x = torch.randn(4, device=DEV)
    g = torch.neuron.NeuronGraph()
    with pytest.raises(RuntimeError, match="capturing|cannot be captured"):
        with torch.neuron.graph(g):
            body(x + 1)
    assert not torch.neuron.is_current_stream_capturing()
    assert not g._graph.captured
    # Nothing is left broken: the device, and a new capture, still work.
    assert (x + 1).sum().item() == pytest.approx((x.cpu() + 1).sum().item(), rel=1e-5)
    g2 = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g2):
        y = x * 2
    g2.replay()
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_capture_state_and_misuse():
    g = torch.neuron.NeuronGraph()
    assert not torch.neuron.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="without captureBegin"):
        g.capture_end()
    x = torch.ones(2, device=DEV)
    with torch.neuron.graph(g):
        assert torch.neuron.is_current_stream_capturing()
        x.add_(1)
    with pytest.raises(RuntimeError, match="already been captured"):
        g.capture_begin()
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [3.0, 3.0]  # capturing ran nothing; two replays did
    assert "steps" in repr(g)
