"""A process's CUDA context takes device memory outside its share, as on a real GPU, and the node sees it.

On an H200 (driver 580.159.04, CUDA 13.0, PyTorch 2.11) a process holding a 3,000 MiB tensor showed 3,518 MiB in
NVML.  The fake libcuda takes HAMI_FAKE_CONTEXT_MIB (default 518) for a process's first context on a device; the
limiter does not charge it to the share; NVML's per-process used memory shows it; ``monitor`` reports it per
allocation (NVML's figure less the region's charge) beside what the scheduler booked for it.
"""

from __future__ import annotations

import json
import subprocess

from hami_devices import limiter
from hami_devices.limiter import ProcessRecord, fake_gpu_snapshot
from hami_devices.models import NOT_AVAILABLE, ProcessUsage
from hami_devices.monitoring import context_memory_mib
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import FAKE_CONTEXT_MIB, PYTHON, Env, fields, need, python_env, run

MIB = 1 << 20
CONTEXT_MIB = FAKE_CONTEXT_MIB
H200_MIB = 143_771
HELD_MIB = 300
UUID = "GPU-00000000-0000-0000-0000-000000000000"

AGENT = """
import json, sys
import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.ledger import SqliteLedger
from hami_devices.registry import load_vendors

config = parse_config({"device-plugin": {"mig-mode": "disabled"}})
devices = hd.discover(ledger=SqliteLedger(sys.argv[2]), registry=load_vendors(["nvidia"], config), config=config)
if sys.argv[1] == "allocate":
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 10}]})
    print(json.dumps({"env": handle.env, "context_mib": handle.grants[0].context_mib}))
else:
    metrics = devices[0].monitor()
    print(json.dumps({"processes": [p.model_dump(mode="json") for p in metrics.processes],
                      "allocations": [a.model_dump(mode="json") for a in metrics.allocations]}))
"""


def _node_env(wenv: Env) -> dict[str, str]:
    """The node agent's view: the fake NVML (describing an H200) over the shared fake-GPU state."""
    fixture = wenv.tmp / "nvml.conf"
    fixture.write_text(f"[gpu]\nname = NVIDIA H200\nuuid = {UUID}\nmemory_mib = {H200_MIB}\n")
    env = python_env()
    env.update(
        HAMI_NVML_LIBRARY=str(need(limiter.fake_library, "nvml/libnvidia-ml.so.1")),
        HAMI_FAKE_NVML_FIXTURE=str(fixture),
        HAMI_FAKE_GPU_STATE=str(wenv.state),
        HAMI_FAKE_MEMORY_MIB=str(H200_MIB),
        HAMI_REGION_DIR=str(wenv.tmp / "regions"),
    )
    return env


def _agent(env: dict[str, str], *args: str) -> dict[str, object]:
    done = subprocess.run([PYTHON, "-c", AGENT, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_a_context_takes_device_memory_outside_the_share(drivers: Drivers, wenv: Env) -> None:
    node = _node_env(wenv)
    ledger = str(wenv.tmp / "ledger.db")
    granted = _agent(node, "allocate", ledger)
    assert granted["context_mib"] == CONTEXT_MIB  # booked on top of the 1 GiB share, from the traits catalog
    env = {**wenv.build(shim=None, HAMI_FAKE_MEMORY_MIB=str(H200_MIB)), **granted["env"]}  # type: ignore[dict-item]
    env["HAMI_FAKE_NVML_FIXTURE"] = node["HAMI_FAKE_NVML_FIXTURE"]
    holder = subprocess.Popen([str(drivers.cuda), "hold", str(HELD_MIB * MIB)], env=env, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "READY rc=0"
        (device,) = fake_gpu_snapshot(wenv.state)
        assert device.process_used_bytes[holder.pid] == (HELD_MIB + CONTEXT_MIB) * MIB  # in the fake's books
        seen = _agent(node, "monitor", ledger)
    finally:
        holder.kill()
        holder.wait()
    # NVML (through the NVIDIA adapter's binding) shows the process with its context ...
    assert [(p["pid"], p["memory_used_mib"]) for p in seen["processes"]] == [  # type: ignore[attr-defined]
        (holder.pid, HELD_MIB + CONTEXT_MIB)
    ]
    # ... the limiter charges the share only the tensor, and monitor reports the difference as the context.
    (usage,) = seen["allocations"]  # type: ignore[misc]
    assert usage["memory_used_mib"] == HELD_MIB
    assert usage["context_memory_mib"] == CONTEXT_MIB
    assert usage["context_booked_mib"] == CONTEXT_MIB


def test_without_a_limiter_a_process_fills_what_its_context_leaves(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build(shim=None, HAMI_FAKE_MEMORY_MIB="4096")
    out = fields(run([drivers.cuda, "oom"], env).stdout)  # no limiter: it fills what its context left
    assert out["filled"] == f"{(4096 - CONTEXT_MIB) * MIB} rc=0"
    (device,) = fake_gpu_snapshot(wenv.state)
    assert device.used_bytes == 0  # the process exited: its context went with it


def test_a_card_too_full_for_a_context_refuses_it(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build(shim=None, HAMI_FAKE_MEMORY_MIB=str(CONTEXT_MIB - 1))
    done = run([drivers.cuda, "oom"], env)
    assert done.returncode == 3 and "no device 0" in done.stderr  # cuDevicePrimaryCtxRetain: out of memory


def test_the_figure_is_a_setting(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build(shim=None, HAMI_FAKE_MEMORY_MIB="4096", HAMI_FAKE_CONTEXT_MIB="0")
    assert fields(run([drivers.cuda, "oom"], env).stdout)["filled"] == f"{4096 * MIB} rc=0"


def test_the_observed_context_is_what_each_listed_process_holds_beyond_its_charge() -> None:
    """Per process the vendor library lists (under the pid this machine gives it): its used memory less the
    region's charge; a process it does not list adds nothing, and with none listed there is no figure."""
    charged = [
        ProcessRecord(pid=7, start_time=1, device=0, memory_used_bytes=100 * MIB, alive=True, host_pid=4007),
        ProcessRecord(pid=8, start_time=1, device=0, memory_used_bytes=50 * MIB, alive=True),
        ProcessRecord(pid=9, start_time=1, device=0, memory_used_bytes=10 * MIB, alive=True),
    ]
    seen = [
        ProcessUsage(pid=4007, memory_used_mib=618),  # pid 7 of a container, 4007 on the host
        ProcessUsage(pid=8, memory_used_mib=568),
        ProcessUsage(pid=1234, memory_used_mib=9999),  # another allocation's process
        ProcessUsage(pid=9, memory_used_mib=NOT_AVAILABLE),
    ]
    assert context_memory_mib(charged, seen) == (618 - 100) + (568 - 50)
    assert context_memory_mib(charged, seen[2:]) == NOT_AVAILABLE
