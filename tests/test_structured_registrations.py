"""tools/gen_structured_registrations.py: what the build compiled is what the tool
generates for the installed torch, and every operator it registers has a neuron kernel.

The build generates the structured ops' registrations from the installed torch's
operator list (torch_neuronx/csrc/CMakeLists.txt). Regenerating them here catches a
build that is stale for the torch it runs with (another torch installed since) and a
generator whose output depends on anything but torch (ordering, the environment).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "gen_structured_registrations.py"
BUILT = ROOT / "build" / "ext" / "torch_neuronx" / "csrc" / "generated"
SHARDS = 4  # STRUCTURED_SHARDS in torch_neuronx/csrc/CMakeLists.txt


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("structured")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    cmd = [sys.executable, str(TOOL), "--out-dir", str(out), "--shards", str(SHARDS)]
    subprocess.run(cmd, env=env, check=True, timeout=300, capture_output=True)
    return {p.name: p.read_text() for p in sorted(out.glob("*.cpp"))}


def test_the_shards_are_all_there(generated):
    assert sorted(generated) == [f"structured_registrations_{i}.cpp" for i in range(SHARDS)]


@pytest.mark.skipif(not BUILT.is_dir(), reason="no build directory (an installed wheel)")
def test_the_build_compiled_what_the_tool_generates_for_this_torch(generated):
    built = {p.name: p.read_text() for p in sorted(BUILT.glob("structured_registrations_*.cpp"))}
    assert built.keys() == generated.keys()
    stale = [name for name in built if built[name] != generated[name]]
    assert not stale, f"{stale} differ from a fresh generation for torch {torch.__version__}"


def test_every_registered_operator_has_a_neuron_kernel(generated):
    names = {n for text in generated.values() for n in re.findall(r'm\.impl\("([^"]+)"', text)}
    assert len(names) > 500  # functional, in-place and out= variants of ~200 structured ops
    missing = [
        n
        for n in sorted(names)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{n}", "PrivateUse1")
    ]
    assert not missing, missing[:20]
