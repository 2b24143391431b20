"""A share task that one node refuses is placed by Ray again, on the other nodes that may hold it.

Ray places a task by the resources its nodes offered when they started; the chosen node's
plugin may still refuse the grant (memory taken outside Ray, free memory split across cards,
a device gone unhealthy).  Ray then fails the task with ``RuntimeEnvSetupError`` and never
retries a runtime-env failure.  So when more than one node could hold a share, its task is
submitted by a small placing task (no CPU, no share of its own) that submits it again after
each refusal, with a label selector that leaves out every node that refused (nodes carry their
name in the ``hami.io/node`` label), until one grants it.  When no node is left it fails with
``ShareRefusedEverywhere``, each node's reasons in it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, cast

from hami_devices.integrations.ray.errors import ShareRefusedEverywhere, refusal
from hami_devices.integrations.ray.node import NODE_LABEL


def candidates(wanted: Mapping[str, float], refused: Collection[str] = ()) -> list[str]:
    """Names of the live labelled nodes whose resources could ever hold ``wanted``, less those that refused."""
    import ray

    nodes = cast(Callable[[], list[dict[str, Any]]], ray.nodes)  # untyped in Ray; typed or Any without the extra
    found = []
    for node in nodes():
        name = (node.get("Labels") or {}).get(NODE_LABEL)
        total = node.get("Resources") or {}
        if node.get("Alive") and name and name not in refused and all(total.get(k, 0) >= v for k, v in wanted.items()):
            found.append(name)
    return found


def may_go_elsewhere(call: Mapping[str, Any]) -> bool:
    """Whether a call with these Ray options may run on any of several nodes, so a refusal can be retried."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = call.get("scheduling_strategy")
    pinned = isinstance(strategy, NodeAffinitySchedulingStrategy) and not strategy.soft
    placed_by_user = strategy is not None and not isinstance(strategy, (str, NodeAffinitySchedulingStrategy))
    one_result = call.get("num_returns", 1) == 1
    return not pinned and not placed_by_user and one_result and len(candidates(call["resources"])) > 1


def leaving_out(call: dict[str, Any], refused: Collection[str]) -> dict[str, Any]:
    """``call`` on any node but those that refused (a soft preference for one of them is dropped)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not refused:
        return call
    selector = {**(call.get("label_selector") or {}), NODE_LABEL: f"!in({','.join(sorted(refused))})"}
    out = {**call, "label_selector": selector}
    if isinstance(out.get("scheduling_strategy"), NodeAffinitySchedulingStrategy):
        out.pop("scheduling_strategy")  # soft (may_go_elsewhere): it named a node, which refused
    return out


def place(
    remote: Any, fresh_options: Callable[[], dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """In the placing task: run ``remote`` under a fresh share, on another node after each refusal."""
    import ray

    refused: dict[str, dict[str, Any]] = {}
    while True:
        call = leaving_out(fresh_options(), refused)
        try:
            return ray.get(remote.options(**call).remote(*args, **kwargs))
        except ray.exceptions.RuntimeEnvSetupError as exc:
            detail = refusal(exc)
            node = detail.get("node") if detail else None
            if detail is None or not node or node in refused:
                raise
            refused[node] = detail
            if not candidates(call["resources"], refused):
                raise ShareRefusedEverywhere(refused) from None


@functools.cache
def placer() -> Any:
    """The placing task: no CPU (it only waits), never retried itself (the share task keeps its own retries)."""
    import ray

    return ray.remote(num_cpus=0, max_retries=0)(place)
