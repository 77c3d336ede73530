"""Simulated hardware: NEURON_RT_VISIBLE_CORES and TORCH_NEURONX_HBM_BYTES_PER_CORE.

The valid configurations and one malformed value per variable run in their own
interpreter with the variable set at start; the other malformed values share one
interpreter that forks a child per value before any device use. All of them are
started together, once per module, and the tests read their reports.
"""

import json

import pytest

GIB = 1 << 30
MIB = 1 << 20

# Reports the topology, uses the last visible device, and checks the next index is refused.
PROBE = """
import json
import torch
import torch_neuronx
r = {"init_at_import": torch_neuronx._C._is_initialized()}
n = torch.neuron.device_count()
r["count"] = n
r["accelerator_count"] = torch.accelerator.device_count()
r["available"] = torch.neuron.is_available()
props = [torch.neuron.get_device_properties(i) for i in range(n)]
r["logical_cores"] = [p.logical_core for p in props]
r["total_memory"] = [p.total_memory for p in props]
r["num_chips"] = props[0].num_chips
r["logical_cores_per_chip"] = props[0].logical_cores_per_chip
r["physical_cores_per_logical_core"] = props[0].physical_cores_per_logical_core
x = torch.arange(5.0, device=f"neuron:{n - 1}")
r["last_device_sum"] = (x * 2).sum().item()
r["mem_info_total"] = torch.neuron.mem_get_info(n - 1)[1]
try:
    torch.empty(1, device=f"neuron:{n}")
    r["next_index_error"] = None
except (RuntimeError, IndexError) as e:
    r["next_index_error"] = str(e)
print(json.dumps(r))
"""

# Must fail at first use (not at import) with a message naming the variable.
BAD_PROBE_FN = """
def bad_probe():
    r = {"available": torch.neuron.is_available()}
    for name, f in [
        ("tensor", lambda: torch.ones(1, device="neuron")),
        ("to", lambda: torch.ones(1).to("neuron")),
        ("device_count", torch.neuron.device_count),
        ("get_device_properties", lambda: torch.neuron.get_device_properties(0)),
        ("synchronize", torch.neuron.synchronize),
    ]:
        try:
            f()
            r[name] = None
        except RuntimeError as e:
            r[name] = str(e)
    r["initialized"] = torch_neuronx._C._is_initialized()
    return r
"""

BAD_PROBE = (
    "import json\nimport torch\nimport torch_neuronx\n"
    + BAD_PROBE_FN
    + "print(json.dumps(bad_probe()))\n"
)

# Many malformed values, one interpreter: a parent that imported torch (the
# runtime asleep) forks a child per value; the child sets the variable before
# the first device use, as a user's environment would be set.
BAD_BATCH = (
    "import json, os\nimport torch\nimport torch_neuronx\n"
    + BAD_PROBE_FN
    + """
assert not torch_neuronx._C._is_initialized()
results = {}
for var, value in CASES:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        os.environ[var] = value
        try:
            out = bad_probe()
        except BaseException as e:  # report, never hang the parent
            out = {"crash": repr(e)}
        os.write(wfd, json.dumps(out).encode())
        os._exit(0)
    os.close(wfd)
    chunks = []
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    results[var + "=" + value] = json.loads(b"".join(chunks) or b"{}")
print(json.dumps(results))
"""
)

VISIBLE = "NEURON_RT_VISIBLE_CORES"
HBM = "TORCH_NEURONX_HBM_BYTES_PER_CORE"

# Run with the variables set at interpreter start: (env, device_count, logical cores, HBM).
STARTUP_OK = {
    "0-1": ({VISIBLE: "0-1", HBM: "64MiB"}, 2, [0, 1], 64 * MIB),
    "2": ({VISIBLE: "2", HBM: "1GiB"}, 1, [2], GIB),
    "0,3": ({VISIBLE: "0,3", HBM: "1073741824"}, 2, [0, 3], GIB),
}
STARTUP_BAD = [(VISIBLE, "abc"), (HBM, "abc")]
BATCH_BAD = [(VISIBLE, v) for v in ["0-9", "3-1", "4", "1,,2", "-1", "0-", " "]] + [
    (HBM, v) for v in ["0", "-5", "12XB", "2TiB", "1.5GiB", "MiB"]
]


@pytest.fixture(scope="module")
def reports(run_py_many):
    jobs = [("default", PROBE, {})]
    jobs += [(("ok", k), PROBE, env) for k, (env, *_) in STARTUP_OK.items()]
    jobs += [(("bad", var, v), BAD_PROBE, {var: v}) for var, v in STARTUP_BAD]
    jobs += [("batch", f"CASES = {BATCH_BAD!r}\n" + BAD_BATCH, {})]
    results = run_py_many([(code, env) for _, code, env in jobs])
    return {key: res for (key, _, _), res in zip(jobs, results, strict=True)}


def _report(reports, key, check):
    return json.loads(check(reports[key]).splitlines()[-1])


def test_default_topology(reports, check):
    r = _report(reports, "default", check)
    assert r["init_at_import"] is False
    assert r["count"] == r["accelerator_count"] == 4
    assert r["logical_cores"] == [0, 1, 2, 3]
    assert r["num_chips"] == 1 and r["logical_cores_per_chip"] == 4
    assert r["physical_cores_per_logical_core"] == 2
    assert r["total_memory"] == [24 * GIB] * 4
    assert r["mem_info_total"] == 24 * GIB
    assert r["last_device_sum"] == 20.0
    assert "there are 4 visible neuron devices" in r["next_index_error"]


@pytest.mark.parametrize("value", list(STARTUP_OK))
def test_visible_cores_and_hbm(reports, check, value):
    _, count, cores, hbm = STARTUP_OK[value]
    r = _report(reports, ("ok", value), check)
    assert r["init_at_import"] is False
    assert r["count"] == count
    assert r["accelerator_count"] == count
    assert r["available"] is True
    assert r["logical_cores"] == cores
    assert r["total_memory"] == [hbm] * count
    assert r["mem_info_total"] == hbm
    assert r["last_device_sum"] == 20.0
    noun = "is 1 visible neuron device" if count == 1 else f"are {count} visible neuron devices"
    assert noun in r["next_index_error"], r["next_index_error"]
    assert f"neuron:{count}" in r["next_index_error"]


def _check_bad(r, var, value):
    assert "crash" not in r, r
    assert r["available"] is False or var != VISIBLE
    uses = ["tensor", "to", "get_device_properties", "synchronize"]
    if var == VISIBLE:
        uses.append("device_count")
    for use in uses:
        msg = r[use]
        assert msg is not None, f"{use} succeeded with {var}={value!r}"
        assert var in msg, msg
        assert f"'{value}'" in msg, msg
        assert "expected" in msg, msg  # says what a valid value looks like
    assert r["initialized"] is False


@pytest.mark.parametrize(("var", "value"), STARTUP_BAD)
def test_malformed_at_startup(reports, check, var, value):
    # The import succeeds; the first device use fails, naming the variable.
    r = _report(reports, ("bad", var, value), check)
    _check_bad(r, var, value)


@pytest.mark.parametrize(("var", "value"), BATCH_BAD)
def test_malformed_values(reports, check, var, value):
    batch = _report(reports, "batch", check)
    _check_bad(batch[f"{var}={value}"], var, value)
