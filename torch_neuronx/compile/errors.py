"""The exceptions of ``torch.compile(backend="neuron")``, under TorchNeuron's names
(``torch_neuronx.neuron_dynamo_backend`` exports them; its programs are NEFF files,
ours the C++ kernel libraries Inductor builds).

Both are ``RuntimeError``s, so code that catches ``RuntimeError`` (as it would for a
CUDA error) catches them too; TorchNeuron derives them from ``Exception``, which
``except Exception`` still catches.
"""

from __future__ import annotations


class NEFFCompilationError(RuntimeError):
    """A graph could not be compiled into a device program. Raised unless fallback
    execution is on (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0, or the compile option
    ``fallback_execution=True``), which runs the graph eagerly instead."""


class NEFFExecutionError(RuntimeError):
    """A compiled graph failed on the device during the call that ran it.

    Raised where the failure is seen at the call: under NEURON_LAUNCH_BLOCKING=1
    (each step of the program waits for the device), or when the program waited for
    the device itself and one of its own steps had failed. With fallback execution on
    (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0, or the compile option
    ``fallback_execution=True``; off by default), ``backend="neuron"`` runs the graph
    eagerly for that call instead, unless the program writes into its inputs (see
    ``writes_inputs``).

    A failure found later, at a synchronisation point (``.item()``, ``.cpu()``,
    ``torch.neuron.synchronize()``), is the ``torch.neuron.DeviceError`` of any
    asynchronous device error (a ``torch.AcceleratorError``; its ``op`` is the graph,
    its ``step`` the failed kernel or op).

    Attributes: ``graph`` (the program, ``"compiled graph 0/0 inference"``), ``step``
    (the failing kernel or op, ``"cpp_fused_index_mul_sum_0"``), ``writes_inputs``
    (the program writes into tensors its caller passed, so steps that ran before the
    failure may have changed them); the device error (``torch.neuron.DeviceError``) is
    ``__cause__``.
    """

    def __init__(self, message: str, *, graph: str, step: str, writes_inputs: bool) -> None:
        super().__init__(message)
        self.graph = graph
        self.step = step
        self.writes_inputs = writes_inputs

    def __reduce__(self):  # picklable (multiprocessing hands exceptions across)
        return (_rebuild_execution_error, (self.args[0], self.graph, self.step, self.writes_inputs))


def _rebuild_execution_error(
    message: str, graph: str, step: str, writes_inputs: bool
) -> NEFFExecutionError:
    return NEFFExecutionError(message, graph=graph, step=step, writes_inputs=writes_inputs)
