"""The ``k8s.io/kube-scheduler/extender/v1`` wire format.

The Go types carry no JSON tags, so kube-scheduler writes (and reads) their Go field
names as keys: ``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes`` ... Go's decoder
matches keys case-insensitively, so incoming keys are looked up the same way; what we
write uses the exact Go names, with every field present (a nil pointer or map is
``null``, as ``encoding/json`` writes it).  The embedded Pod and Node objects are the
Kubernetes API's own JSON (``metadata``, ``spec`` ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_devices.errors import InvalidRequest

MIN_PRIORITY = 0
MAX_PRIORITY = 10  # MaxExtenderPriority


def key(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` matched as Go's decoder matches a field: exact first, then case-insensitively."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == lowered:
            return v
    return None


def _mapping(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRequest(field, "must be a non-empty string")
    return value


@dataclass
class ExtenderArgs:
    """Filter and prioritize input: the pod and the candidate nodes (names, or full Node objects)."""

    pod: dict[str, Any]
    node_names: list[str]
    nodes: list[dict[str, Any]] | None  # the NodeList items when kube-scheduler sent objects (nodeCacheCapable false)
    node_list: dict[str, Any] | None  # the NodeList itself, echoed back with the survivors


def _names(values: list[Any]) -> bool:
    """Every value a non-empty string (checked at C speed for the usual list of plain strings)."""
    if set(map(type, values)) <= {str}:
        return "" not in values
    return all(isinstance(n, str) and n for n in values)


def parse_args(body: Any) -> ExtenderArgs:
    body = _mapping(body, "<body>")
    pod = _mapping(key(body, "Pod"), "Pod")
    names = key(body, "NodeNames")
    node_list = key(body, "Nodes")
    if names is not None:
        if not isinstance(names, list) or not _names(names):
            raise InvalidRequest("NodeNames", "must be a list of node names")
        return ExtenderArgs(pod, list(names), None, None)
    if node_list is None:
        raise InvalidRequest("Nodes", "give NodeNames (nodeCacheCapable) or Nodes")
    node_list = _mapping(node_list, "Nodes")
    items = node_list.get("items") or []
    if not isinstance(items, list):
        raise InvalidRequest("Nodes.items", "must be a list of Node objects")
    out: list[str] = []
    for i, item in enumerate(items):
        meta = _mapping(_mapping(item, f"Nodes.items[{i}]").get("metadata"), f"Nodes.items[{i}].metadata")
        out.append(_string(meta.get("name"), f"Nodes.items[{i}].metadata.name"))
    return ExtenderArgs(pod, out, items, node_list)


def filter_result(
    args: ExtenderArgs, passed: list[str], failed: Mapping[str, str], unresolvable: Mapping[str, str]
) -> dict[str, Any]:
    """``ExtenderFilterResult``: the survivors in the form the candidates came in."""
    nodes: dict[str, Any] | None = None
    names: list[str] | None = None
    if args.nodes is not None:
        keep = set(passed)
        items = [item for item, name in zip(args.nodes, args.node_names, strict=True) if name in keep]
        nodes = {**(args.node_list or {}), "items": items}
    else:
        names = list(passed)
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": "",
    }


def filter_error(message: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
            "Error": message}


def priorities(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    """``HostPriorityList``."""
    return [{"Host": host, "Score": int(score)} for host, score in scores.items()]


@dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding(body: Any) -> BindingArgs:
    body = _mapping(body, "<body>")
    return BindingArgs(
        pod_name=_string(key(body, "PodName"), "PodName"),
        pod_namespace=_string(key(body, "PodNamespace"), "PodNamespace"),
        pod_uid=_string(key(body, "PodUID"), "PodUID"),
        node=_string(key(body, "Node"), "Node"),
    )


def binding_result(error: str = "") -> dict[str, Any]:
    """``ExtenderBindingResult``."""
    return {"Error": error}


@dataclass
class PreemptionArgs:
    """``ExtenderPreemptionArgs``: the preemptor and, per node, the victims kube-scheduler chose (their UIDs)."""

    pod: dict[str, Any]
    victims: dict[str, list[str]]
    pdb_violations: dict[str, int]


def parse_preemption(body: Any) -> PreemptionArgs:
    body = _mapping(body, "<body>")
    pod = _mapping(key(body, "Pod"), "Pod")
    meta = key(body, "NodeNameToMetaVictims")
    full = key(body, "NodeNameToVictims")
    source, field = (meta, "NodeNameToMetaVictims") if meta is not None else (full, "NodeNameToVictims")
    victims: dict[str, list[str]] = {}
    pdb: dict[str, int] = {}
    for node, entry in _mapping(source or {}, field).items():
        where = f"{field}.{node}"
        entry = _mapping(entry or {}, where)
        pods = key(entry, "Pods") or []
        if not isinstance(pods, list):
            raise InvalidRequest(f"{where}.Pods", "must be a list")
        uids = []
        for i, pod_entry in enumerate(pods):
            pod_entry = _mapping(pod_entry, f"{where}.Pods[{i}]")
            if meta is not None:
                uids.append(_string(key(pod_entry, "UID"), f"{where}.Pods[{i}].UID"))
            else:
                pod_meta = _mapping(pod_entry.get("metadata"), f"{where}.Pods[{i}].metadata")
                uids.append(_string(pod_meta.get("uid"), f"{where}.Pods[{i}].metadata.uid"))
        violations = key(entry, "NumPDBViolations") or 0
        if not isinstance(violations, int) or isinstance(violations, bool) or violations < 0:
            raise InvalidRequest(f"{where}.NumPDBViolations", "must be a non-negative integer")
        victims[node] = uids
        pdb[node] = violations
    return PreemptionArgs(pod, victims, pdb)


def preemption_result(victims: Mapping[str, list[str]], pdb: Mapping[str, int]) -> dict[str, Any]:
    """``ExtenderPreemptionResult``: ``NodeNameToMetaVictims`` for the nodes where the pod fits."""
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": int(pdb.get(node, 0))}
            for node, uids in victims.items()
        }
    }
