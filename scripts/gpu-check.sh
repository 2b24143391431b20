#!/usr/bin/env bash
# Runs the NVIDIA adapter on a real NVIDIA host and prints what it found, as JSON (never run by the tests).
#
#   scripts/gpu-check.sh                                   # the driver's libnvidia-ml.so.1
#   HAMI_NVML_LIBRARY=/usr/lib64/libnvidia-ml.so.1 scripts/gpu-check.sh
#   PYTHON=python3 scripts/gpu-check.sh > gpu-check.json
#
# Output: one JSON object with the probe (library, driver), every GPU's DeviceInfo (traits, MIG mode,
# instances and free profiles, NVLink/PCIe pair scores), one monitor() sample per GPU, and the NVML
# symbol versions that served (v1/v2/v3 fallbacks).  Exit status 0 when NVML was usable and every GPU was
# read; 1 when NVML is not usable here; 2 when some GPU reports itself unhealthy.
set -euo pipefail

PY=${PYTHON:-python3}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current \
    --format=csv,noheader >&2 || true

exec "$PY" - <<'PYEOF'
import json
import sys

import hami_devices
from hami_devices.ledger import MemoryLedger
from hami_devices.registry import load_vendors, safe_probe

registry = load_vendors(["nvidia"])
adapter = registry.get("nvidia")
probe = safe_probe(adapter)
report = {"probe": {"available": probe.available, "detail": probe.detail, "library": probe.library}}
if not probe.available:
    print(json.dumps(report, indent=2))
    sys.exit(1)
devices = hami_devices.discover(registry=registry, ledger=MemoryLedger())
report["devices"] = [d.info.model_dump(mode="json") for d in devices]
report["monitoring"] = [d.monitor().model_dump(mode="json") for d in devices]
from hami_nvidia import binding  # noqa: E402

report["nvml_versions"] = binding.session().served
print(json.dumps(report, indent=2))
sys.exit(0 if all(d.info.healthy for d in devices) else 2)
PYEOF
