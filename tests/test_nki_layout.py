"""One layout for the NKI program records on both sides.

The C++ simulator defines the records a traced kernel is handed over in
(runtime/include/neuron_runtime/nki/records.h, program.h, dtype.h); the
Python front end takes the codes and sizes from it through
``torch_neuronx.nki.layout``. What the front end still writes by hand (the
order of the words it emits, its dtype tables for torch and NumPy, the op
names it emits by) is checked here against what the simulator reads back.
"""

import re
from pathlib import Path

import neuronxcc.nki.isa as lisa
import nki
import nki.language as nl
import numpy as np
import pytest
import torch

from torch_neuronx import _C
from torch_neuronx.nki import dtypes as dt
from torch_neuronx.nki import language, layout
from torch_neuronx.nki.kernel import compiled_for

OP_NAMES = {code: name for name, code in layout.OPS.items()}
ENGINE_NAMES = {code: name for name, code in layout.ENGINES.items()}
SPACE_NAMES = {code: name for name, code in layout.SPACES.items()}


@nki.jit
def probe(a, b):
    """out = a^T b twice over (the second matmul accumulates), and
    rows = sum(3 * b) along the free axis."""
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.load(a)
    tb = nl.load(b)
    acc = nl.zeros((64, 32), nl.float32, buffer=nl.psum)
    acc += lisa.nc_matmul(ta, tb)
    acc += lisa.nc_matmul(ta, tb)
    nl.store(out, value=nl.copy(acc))
    nl.store(rows, value=nl.sum(nl.multiply(tb, 3.0), axis=1, keepdims=True))
    return out, rows


def access(rec, name):
    """An access of an instruction record as (buffer, sizes, strides)."""
    a = rec[name]
    n = a["ndim"]
    return a["buffer"], a["size"][:n], a["stride"][:n]


@pytest.fixture(scope="module")
def probe_records():
    a = torch.ones((128, 64), dtype=torch.bfloat16)
    b = torch.ones((128, 32), dtype=torch.bfloat16)
    ck = compiled_for(probe, (), (a, b), {})
    return ck, ck.program.records()


def test_buffer_records_read_back_as_written(probe_records):
    _, rec = probe_records
    bufs = rec["buffers"]
    a, b = bufs[0], bufs[1]
    assert SPACE_NAMES[a["space"]] == "hbm" and a["dtype"] == dt.bfloat16.code
    assert (a["elements"], a["external"], a["initialized"]) == (128 * 64, 0, 1)
    assert (a["partitions"], a["bytes_per_partition"]) == (0, 0)
    assert (b["elements"], b["external"]) == (128 * 32, 1)
    results = sorted((r for r in bufs if r["external"] >= 2), key=lambda r: r["external"])
    assert [(r["elements"], r["dtype"], r["initialized"]) for r in results] == [
        (64 * 32, dt.float32.code, 0),
        (128, dt.float32.code, 0),
    ]
    tiles = [r for r in bufs if SPACE_NAMES[r["space"]] == "sbuf"]
    ta = next(r for r in tiles if r["dtype"] == dt.bfloat16.code)
    assert (ta["partitions"], ta["bytes_per_partition"], ta["elements"]) == (128, 128, 128 * 64)
    psum = [r for r in bufs if SPACE_NAMES[r["space"]] == "psum"]
    assert {(r["partitions"], r["bytes_per_partition"]) for r in psum} == {(64, 32 * 4)}


def test_instruction_records_read_back_as_written(probe_records):
    ck, rec = probe_records
    ins = rec["instructions"]
    assert ck.program.num_instructions == len(ins)
    ops = [OP_NAMES[r["op"]] for r in ins]
    assert ops.count("matmul") == 2 and "tensor_scalar" in ops and "reduce" in ops

    load_a = ins[0]
    assert (OP_NAMES[load_a["op"]], ENGINE_NAMES[load_a["engine"]]) == ("copy", "dma")
    assert access(load_a, "src0") == (0, [128, 64], [64, 1])
    assert access(load_a, "src1")[0] == -1 and access(load_a, "src2")[0] == -1

    first, second = (r for r in ins if OP_NAMES[r["op"]] == "matmul")
    assert ENGINE_NAMES[first["engine"]] == "tensor"
    # nl.zeros of the PSUM tile folds into the first product; the second adds.
    assert not first["flags"] & layout.FLAGS["accumulate"]
    assert second["flags"] & layout.FLAGS["accumulate"]
    assert access(second, "src0")[1:] == ([128, 64], [64, 1])
    assert access(second, "src1")[1:] == ([128, 32], [32, 1])
    assert access(second, "dst")[1] == [64, 32]

    scale = next(r for r in ins if OP_NAMES[r["op"]] == "tensor_scalar")
    assert scale["alu0"] == language.ALU["multiply"]
    assert scale["flags"] & layout.FLAGS["operand0_imm"] and scale["imm"][0] == 3.0
    total = next(r for r in ins if OP_NAMES[r["op"]] == "reduce")
    assert (total["alu0"], total["keep"]) == (language.ALU["add"], 1)
    assert access(total, "src0")[1] == [128, 32] and access(total, "dst")[1] == [128]

    # loc: the kernel line that made each instruction.
    here = Path(__file__).name
    for r in ins:
        filename, line, func = ck.trace_locs[r["loc"]]
        assert (Path(filename).name, func) == (here, "probe"), r


def test_python_element_types_are_the_runtimes():
    runtime = [(t["name"], t["code"], t["itemsize"]) for t in layout.DTYPES]
    assert [(d.name, d.code, d.itemsize) for d in dt.ALL] == runtime
    for d in dt.ALL:
        # The torch and NumPy types the front end maps each one to (tables
        # written on the Python side) hold elements of the runtime's size.
        # NumPy types of every one; torch types of all, float8_e4m3's being
        # float8_e4m3fn (torch has no IEEE-style E4M3; see dt.torch_dtype).
        torch_type = dt.torch_dtype(d)
        if d in dt.MX_PACKED:
            # Torch has no MX packed types: their uint containers (mx.py).
            assert torch_type.itemsize == d.itemsize and not torch_type.is_floating_point, d
        elif d.name != "float8_e4m3":
            assert torch_type.itemsize == d.itemsize, d
            assert torch_type.is_floating_point == d.is_float, d
            assert torch_type.is_signed == d.is_signed, d
            assert dt.as_dtype(torch_type) is d
        try:
            numpy_type = np.dtype(dt.numpy_dtype(d))
        except TypeError:  # bfloat16 and fp8 arrays need ml_dtypes
            assert d.is_float and d.itemsize <= 2, d
        else:
            assert numpy_type.itemsize == d.itemsize, d
            assert dt.as_dtype(numpy_type) is d
        assert dt.as_dtype(d.name) is d


def test_names_the_front_end_emits_are_the_runtimes():
    # Every opcode and engine the front end emits by name, every ALU
    # operation and activation it names: the runtime must know it.
    src = "\n".join(
        p.read_text() for p in Path(layout.__file__).parent.rglob("*.py") if p.name != "layout.py"
    )
    emitted = re.findall(r'emit\(\s*"(\w+)",\s*(?:"(\w+)")?', src)
    assert {op for op, _ in emitted} == set(layout.OPS)
    assert {engine for _, engine in emitted if engine} <= set(layout.ENGINES)
    assert set(re.findall(r'\bALU\["(\w+)"\]', src)) <= set(layout.ALU)
    assert set(re.findall(r'\bACT\["(\w+)"\]', src)) <= set(layout.ACT)
    assert language._SCALAR_ENGINE_ACTS <= set(layout.ACT)


def encode(records):
    """Flat records from records() dicts, in the order layout describes."""
    bw = [r[f] for r in records["buffers"] for f in layout.BUFFER_FIELDS]
    iw, imm = [], []
    for r in records["instructions"]:
        iw += [r[f] for f in layout.INSTRUCTION_FIELDS]
        for a in layout.INSTRUCTION_ACCESSES:
            for field, words in layout.ACCESS_FIELDS:
                iw += r[a][field] if words > 1 else [r[a][field]]
        imm += r["imm"]
    return np.array(bw, np.int64), np.array(iw, np.int64), np.array(imm)


def test_the_described_layout_is_the_one_the_binding_reads(probe_records):
    ck, rec = probe_records
    bw, iw, imm = encode(rec)
    assert iw.size == len(rec["instructions"]) * layout.INSTRUCTION_WORDS
    assert imm.size == len(rec["instructions"]) * layout.IMMEDIATES
    rebuilt = _C._NkiProgram(bw, iw, imm, ck.program.externals)
    assert rebuilt.records() == rec
    assert rebuilt.profile() == ck.program.profile()
    # A record one word short is refused, not misread.
    with pytest.raises(RuntimeError, match="malformed program records"):
        _C._NkiProgram(bw, iw[:-1], imm, ck.program.externals)
    with pytest.raises(RuntimeError, match="malformed program records"):
        _C._NkiProgram(bw[:-1], iw, imm, ck.program.externals)
