"""What the engine answered, judged by the oracle: placements, refusals, and each policy's choice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hami_devices as hd
from hami_devices.scheduler import Engine, Placement
from tests.oracles import placement_rules as rules
from tests.oracles.placement_rules import World
from tests.oracles.policy_scores import FULLNESS_POLICIES, bestfit_problems, mean_fullness


def unknown_names(world: World, request: Any) -> dict[str, list[str]]:
    """Parts whose vendor or model list names nothing any device of the cluster answers to."""
    out: dict[str, list[str]] = {}
    vendors = {d.vendor.lower() for d in world.devices}
    models = set().union(*(d.names() for d in world.devices))
    for i, part in enumerate(request.parts):
        if part.vendors and not {v.lower() for v in part.vendors} & vendors:
            out[f"parts.{i}.vendors"] = [rules.UNKNOWN_VENDOR]
        if part.models and not {rules.model_key(m) for m in part.models} & models:
            out[f"parts.{i}.models"] = [rules.UNKNOWN_MODEL]
    return out


def refusal_problems(world: World, request: Any, error: hd.InsufficientResources) -> list[str]:
    """Every code of a refusal the rules do not back, and every rule broken that the refusal leaves out."""
    reasons = {k: [str(c) for c in v] for k, v in error.reasons.items()}
    problems: list[str] = []
    unknown = unknown_names(world, request)
    if unknown:
        if reasons != unknown:
            problems.append(f"names nothing in the cluster answers to: expected {unknown}, got {reasons}")
        if error.permanent is not True:
            problems.append("a name nothing answers to is a permanent refusal")
        return problems
    if error.permanent is True and rules.fits_empty(world, request):
        problems.append("refused as permanent, but it fits the emptied cluster")
    hosts = {h.name: h for h in world.hosts}
    uuids = {d.uuid for d in world.devices}
    for key, codes in reasons.items():
        if key in uuids:
            problems += _device_problems(world, request, key, codes)
        elif key in hosts:
            problems += _node_problems(world, request, hosts[key], codes)
        else:
            problems.append(f"reason for {key!r}, neither a node nor a device")
    for dev in world.devices:  # the full per-device detail: every device some part cannot use says why
        if not hosts[dev.node].schedulable:
            continue
        for part in request.parts:
            first = rules.judge(world, part, dev).first
            if first is not None and first not in reasons.get(dev.uuid, []):
                problems.append(f"{dev.uuid} breaks {first} for a part, not reported (got {reasons.get(dev.uuid)})")
    return problems


def _device_problems(world: World, request: Any, uuid: str, codes: list[str]) -> list[str]:
    dev = world.device(uuid)
    firsts = {first for part in request.parts if (first := rules.judge(world, part, dev).first) is not None}
    return [f"{uuid}: {code} is not the first rule it breaks for any part ({sorted(firsts)})"
            for code in codes if code not in firsts]


def _node_problems(world: World, request: Any, host: rules.Host, codes: list[str]) -> list[str]:
    allowed: set[str] = set()
    if not host.schedulable:
        allowed.add(rules.NODE_UNSCHEDULABLE)
    if host.cpu_free < request.host_cpu_milli:
        allowed.add(rules.NODE_CPU)
    if host.mem_free < request.host_memory_mib:
        allowed.add(rules.NODE_MEMORY)
    for part in request.parts:
        devices = world.on(host.name)
        if sum(rules.usable(world, part, d) is not None for d in devices) < part.count:
            allowed.add(rules.NODE_DEVICES)
        allowed |= {first for d in devices if (first := rules.judge(world, part, d).first) is not None}
    if len(request.parts) > 1 and not rules.holds_all_parts(world, request, host.name):
        allowed.add(rules.NODE_DEVICES)  # each part alone fits, the parts together do not
    return [f"node {host.name}: {code} is not backed by the rules" for code in codes if code not in allowed]


@dataclass
class Judgement:
    """The engine's answer to one request, held against every placement the rules allow.

    ``wrong``: a placement the rules forbid, a grant they would not give, a reason they do not back,
    a reason left out.  ``missed``: it refused although the rules allow a placement.  ``worse``: its
    choice is not an argmax of the policy's score.  ``silent``: it refused without a single reason.
    """

    wrong: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    worse: list[str] = field(default_factory=list)
    silent: bool = False

    def all(self) -> list[str]:
        return [*self.wrong, *self.missed, *self.worse, *(["a refusal without a single reason"] * self.silent)]


def judge_decision(world: World, engine: Engine, request: Any, policy: str) -> Judgement:
    """Place ``request`` with ``engine`` and judge the answer against every placement the rules allow."""
    options = list(rules.feasible(world, request))
    placement = engine.try_place(request)
    out = Judgement()
    if placement is None:
        if options:
            node, assignment = options[0]
            out.missed.append(f"the engine found no placement; the rules allow {node}: {assignment}")
            return out
        try:
            engine.place(request)
        except hd.InsufficientResources as error:
            out.silent = not error.reasons
            if error.reasons:
                out.wrong += refusal_problems(world, request, error)
            return out
        out.wrong.append("try_place found nothing but place placed")
        return out
    out.wrong += rules.check_placement(world, request, placement.node, placement.grants)
    if not out.wrong:
        out.worse += _argmax_problems(world, request, policy, placement, options)
    return out


def _argmax_problems(
    world: World, request: Any, policy: str, placement: Placement, options: list[tuple[str, Any]]
) -> list[str]:
    chosen = rules.grants_of(world, request, _assignment(request, placement))
    if policy in FULLNESS_POLICIES:
        sign = FULLNESS_POLICIES[policy]
        values = [sign * mean_fullness(world, rules.grants_of(world, request, a)) for _, a in options]
        mine = sign * mean_fullness(world, chosen)
        if mine < max(values):
            return [f"{policy}: mean fullness {float(sign * mine):.6f}, the best is {float(sign * max(values)):.6f}"]
    if policy == "bestfit" and len(request.parts) == 1 and request.parts[0].count == 1:
        singles = [(node, a[0][0], rules.grants_of(world, request, a)[0][2]) for node, a in options]
        (_, uuid, share), = chosen
        return bestfit_problems(world, request, (placement.node, uuid, share), singles)
    return []


def _assignment(request: Any, placement: Placement) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(g.uuid for g in placement.grants if g.part == i) for i in range(len(request.parts)))
