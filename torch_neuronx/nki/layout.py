"""The NKI simulator's record layout and codes, as the C++ runtime defines
them (runtime/include/neuron_runtime/nki/records.h, program.h, dtype.h).

The front end writes a traced kernel as flat records for the simulator; every
number in them (opcodes, engine ids, ALU and activation codes, flag bits,
memory spaces, dtype codes and sizes, the word order of a record, the
NeuronCore's limits) comes from here, read from the ``_C`` binding, so the
Python side restates none of them. tests/test_nki_layout.py checks what is
still written by hand on this side (the order ``trace.Trace.emit`` and
``kernel._build`` write words in) against what the simulator reads back.
"""

from __future__ import annotations

from .. import _C

_LAYOUT = _C._nki_layout()

# The NeuronCore-v3 the simulator models.
MAX_DIMS: int = _LAYOUT["max_dims"]
PARTITIONS: int = _LAYOUT["partitions"]
SBUF_BYTES_PER_PARTITION: int = _LAYOUT["sbuf_bytes_per_partition"]
PSUM_BANKS: int = _LAYOUT["psum_banks"]
PSUM_BANK_BYTES: int = _LAYOUT["psum_bank_bytes"]

# {name: code}
SPACES: dict[str, int] = dict(_LAYOUT["spaces"])
ENGINES: dict[str, int] = dict(_LAYOUT["engines"])
OPS: dict[str, int] = dict(_LAYOUT["ops"])
ALU: dict[str, int] = dict(_LAYOUT["alu"])
ACT: dict[str, int] = dict(_LAYOUT["act"])
FLAGS: dict[str, int] = dict(_LAYOUT["flags"])
# One dict per element type, in code order: name, code, itemsize, is_float,
# is_signed.
DTYPES: list[dict] = list(_LAYOUT["dtypes"])

# Record word order.
BUFFER_FIELDS: tuple[str, ...] = tuple(_LAYOUT["buffer_fields"])
INSTRUCTION_FIELDS: tuple[str, ...] = tuple(_LAYOUT["instruction_fields"])
INSTRUCTION_ACCESSES: tuple[str, ...] = tuple(_LAYOUT["instruction_accesses"])
ACCESS_FIELDS: tuple[tuple[str, int], ...] = tuple(
    (name, words) for name, words in _LAYOUT["access_fields"]
)
ACCESS_WORDS: int = sum(words for _, words in ACCESS_FIELDS)
INSTRUCTION_WORDS: int = len(INSTRUCTION_FIELDS) + len(INSTRUCTION_ACCESSES) * ACCESS_WORDS
IMMEDIATES: int = _LAYOUT["immediates"]
