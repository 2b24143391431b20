"""An admission loop teaches its engine's workload mix once per task it is given, never per attempt."""

from __future__ import annotations

from hami_devices.queueing import AdmissionLoop, parse_queues
from hami_devices.scheduling import Engine
from tests.queueing.helpers import cluster, gpu


def test_each_submitted_task_is_observed_once_however_often_it_is_tried() -> None:
    engine = Engine(cluster(("n1", "T4", 1)), "fragmentation-aware")
    loop = AdmissionLoop(engine, parse_queues({"queues": [{"name": "q"}]}))
    mix = engine.learned_mix()
    assert mix is not None
    seen = mix.to_dict()["seen"]
    loop.submit(gpu("fits", "q", cores=60), now=0.0)
    loop.submit(gpu("waits", "q", cores=60), now=0.0)  # the device has 40 % left: it is tried at every tick
    for tick in range(5):
        loop.tick(now=float(tick))
    assert [t.state for t in (loop.task("fits"), loop.task("waits"))] == ["running", "pending"]
    assert mix.to_dict()["seen"] == seen + 2
