"""The inventory file's JSON Schema, every field described (``hami-devices inventory schema``).

The inventory's models (``inventory.InventorySpec``) say what each field accepts; what each field
means is said here once, and the schema carries it, so an editor checking a file shows it and
``docs/embedding.md`` lists the same words.
"""

from __future__ import annotations

import json
from typing import Any

from hami_devices.inventory import InventorySpec

FIELDS: dict[str, dict[str, str]] = {
    "InventorySpec": {
        "nodes": "the cluster's nodes (at least one); each entry may stand for several alike (replicas)",
    },
    "NodeEntrySpec": {
        "name": "the node's name; with replicas > 1 the nodes are name-0 .. name-(replicas-1)",
        "replicas": "how many nodes alike this entry stands for",
        "cpu_milli": "host CPU the node offers tasks, in thousandths of a core (a request's host_cpu_milli)",
        "memory_mib": "host memory the node offers tasks, in MiB (a request's host_memory_mib)",
        "labels": "the node's labels: a request's node_selector must match them, its labels prefer them",
        "taints": "keep off requests that do not tolerate them (key, value, effect NoSchedule/PreferNoSchedule)",
        "devices": "the node's accelerators, in groups of one vendor and model",
    },
    "DeviceGroupSpec": {
        "vendor": "the vendor adapter that serves them (nvidia, ascend, cambricon, or a plugin's name)",
        "model": "the model, by catalog name or alias (T4, A100-80GB, 910B3, MLU370-X8 ...): its traits, "
                 "memory and partition profiles come from the catalog",
        "count": "how many devices of this model the node has (indexes run on across the node's groups of one "
                 "vendor)",
        "link": "how the group's devices are connected (nvlink, hccs, mlu-link, xgmi, pcie): topology scores",
        "numa_nodes": "NUMA nodes the group's devices spread over, in equal runs of indexes",
        "memory_mib": "each device's memory, overriding the catalog's",
        "split_count": "most sharers per device, overriding device-plugin.split-count",
        "unhealthy": "indexes within this group of devices reported unhealthy (never placed on)",
        "attributes": "vendor facts kept in each device's DeviceInfo.attributes (product_name ...)",
    },
    "Taint": {
        "key": "the taint's key",
        "value": "the taint's value (empty: none)",
        "effect": "NoSchedule (never without a toleration) or PreferNoSchedule (avoided when possible)",
    },
}


def inventory_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an inventory file, each field with its description."""
    schema = InventorySpec.model_json_schema()
    defs = schema.get("$defs", {})
    for name, fields in FIELDS.items():
        target = schema if name == "InventorySpec" else defs.get(name)
        if target is None:
            continue
        for field, text in fields.items():
            if field in target.get("properties", {}):
                target["properties"][field]["description"] = text
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hami-devices inventory"
    return schema


def inventory_schema_json() -> str:
    return json.dumps(inventory_schema(), indent=2, sort_keys=True)
