"""Refusals counted in a region reach the operator: the observer (whoever reconciles region readings into
the ledger) writes one ``limiter.refused`` event per allocation and kind with the refusals since the last
one, the exporter serves their sum as ``hami_limiter_refusals_total{uuid,kind}``, and ``hami-devices
events`` lists them.  A real workload process under the CUDA shim, against the fake libcuda."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import hami_devices as hd
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.observability import server
from hami_devices.observability.observer import Observer
from hami_devices.observability.snapshot import Sampler
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, fields, run
from tests.observability.helpers import CLI, cli_env, simulated, t4_node

MIB = 1 << 20


def _refusals(text: str, uuid: str, kind: str) -> float:
    prefix = f'hami_limiter_refusals_total{{uuid="{uuid}",kind="{kind}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line[len(prefix) :])


def test_six_refusals_are_six_in_the_region_the_scrape_and_the_events(
    drivers: Drivers, wenv: Env, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]})
    uuid = handle.grants[0].uuid
    env = {**wenv.build(shim=None), **handle.env}
    assert fields(run([drivers.cuda, "tries", "6", str(100 * MIB)], env).stdout)["refused"] == "6"

    exporter = server.start(devices, ledger, listen=None, observe_interval_s=3600)  # one observation, at start
    try:
        (reading,) = exporter.sampler.snapshot().regions
        assert reading.grants[uuid].refusals == {"memory": 6, "compute": 0}
        text = exporter.scrape().decode()
    finally:
        exporter.stop()
    assert _refusals(text, uuid, "memory") == 6.0 and _refusals(text, uuid, "compute") == 0.0

    # Two more: the next observation records the 2 since the last event, not the 8 since the grant.
    assert fields(run([drivers.cuda, "tries", "2", str(100 * MIB)], env).stdout)["refused"] == "2"
    sampler = Sampler(devices, ledger, timeout_s=5)
    Observer(ledger).observe(sampler.snapshot())
    Observer(ledger).observe(sampler.snapshot())  # nothing new: no event
    sampler.close()

    listed = subprocess.run(
        [*CLI, "events", "--ledger", str(path), "--kind", EventKind.LIMITER_REFUSALS, "--json"],
        capture_output=True, text=True, env=cli_env(), timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    events = json.loads(listed.stdout)["events"]
    assert [(e["kind"], e["allocation_id"], e["uuid"], e["data"]["refusal"], e["data"]["count"], e["data"]["total"])
            for e in events] == [
        ("limiter.refused", handle.id, uuid, "memory", 6, 6),
        ("limiter.refused", handle.id, uuid, "memory", 2, 8),
    ]
    ledger.close()
