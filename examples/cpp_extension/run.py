"""Builds the scaled_add extension (scaled_add.cpp) and runs it on neuron.

    python examples/cpp_extension/run.py

The first run compiles the extension (about a minute); later runs reuse the
build in torch's extensions directory (TORCH_EXTENSIONS_DIR).
"""

from pathlib import Path

import torch

from torch_neuronx import cpp_extension

cpp_extension.load(
    "neuron_example",
    [str(Path(__file__).with_name("scaled_add.cpp"))],
    is_python_module=False,
    verbose=True,
)

a = torch.randn(4, 5)
b = torch.randn(4, 5)
out = torch.ops.neuron_example.scaled_add(a.to("neuron"), b.to("neuron"), 0.5)
print(out.device, torch.allclose(out.cpu(), a + 0.5 * b))
