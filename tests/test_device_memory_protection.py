"""Device memory the host cannot read by accident (TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1).

With the mode on, the HBM arenas are inaccessible to the host outside device work:
ops, copies and synchronisation work as always, and a host read of a neuron
tensor's memory outside device work (a missing synchronize, a device pointer used
by host code) ends the process with SIGSEGV and a message naming the address. Each
scenario runs in a fresh interpreter (a fault ends it).
"""

import signal

ON = {"TORCH_NEURONX_PROTECT_DEVICE_MEMORY": "1"}


def test_device_work_runs_as_usual_with_protection_on(run_py, check):
    out = check(
        run_py(
            """
            import torch
            x = torch.arange(1000.0, device="neuron")
            y = (x * 2).sum()
            m = torch.randn(64, 64, device="neuron")
            z = (m @ m).relu().cpu()
            h = torch.ones(3).pin_memory().to("neuron", non_blocking=True)
            torch.neuron.synchronize()
            print(y.item(), tuple(z.shape), h.tolist(), x[3].item(), x.nonzero().shape[0])
            print(torch.neuron.memory_allocated() > 0)
            """,
            env=ON,
        )
    )
    assert out.split("\n")[0] == "999000.0 (64, 64) [1.0, 1.0, 1.0] 3.0 999"


def test_a_host_read_of_device_memory_faults_with_a_message(run_py):
    r = run_py(
        """
        import ctypes, sys
        import torch
        x = torch.arange(16.0, device="neuron") + 1
        torch.neuron.synchronize()  # the device is idle: access is closed
        print("reading", flush=True)
        ctypes.string_at(x.data_ptr(), 4)
        print("read: not protected", flush=True)
        """,
        env=ON,
    )
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout, r.stderr)
    assert "reading" in r.stdout and "not protected" not in r.stdout
    assert "host access to neuron device memory at 0x" in r.stderr, r.stderr
    assert "missing synchronize?" in r.stderr


def test_off_by_default_and_bad_values_are_refused(run_py, check):
    read = """
        import ctypes
        import torch
        x = torch.full((4,), 7, dtype=torch.uint8, device="neuron")
        torch.neuron.synchronize()
        print(ctypes.string_at(x.data_ptr(), 4) == bytes([7] * 4))
        """
    assert check(run_py(read)).strip() == "True"  # the host can read: today's behaviour
    r = run_py(read, env={"TORCH_NEURONX_PROTECT_DEVICE_MEMORY": "yes"})
    assert r.returncode != 0
    assert "TORCH_NEURONX_PROTECT_DEVICE_MEMORY='yes': expected 0 or 1" in r.stderr
