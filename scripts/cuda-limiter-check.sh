#!/usr/bin/env bash
# Check of the CUDA limiter shim on a real NVIDIA host with PyTorch (never run by the tests).
#
#   scripts/cuda-limiter-check.sh            # 1 GiB memory limit
#   LIMIT=2g PYTHON=python3 scripts/cuda-limiter-check.sh
#
# Checks, each against the shipped shim (libhami_cuda.so) in LD_PRELOAD:
#   memory_region      HAMI_DEVICE_MEMORY_LIMIT with a region file: torch.cuda.mem_get_info() reports the limit
#                      as the total, allocation stops with OutOfMemoryError at or below it
#   memory_hami_core   the same through HAMi-core's CUDA_DEVICE_MEMORY_LIMIT_0 / CUDA_DEVICE_MEMORY_SHARED_CACHE
#   memory_vmm         the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate / cuMemMap)
#   memory_async       the same with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (memory pools)
#   nvidia_smi         nvidia-smi inside the limited environment, while a process of the allocation holds
#                      memory: memory.total is the limit, memory.used what the allocation holds
#   pynvml             nvmlDeviceGetMemoryInfo from Python (ctypes + dlsym) inside the limited environment
#   shared_limit       two processes of ONE allocation allocating at once: together never past the limit
#   two_allocations    two processes of two allocations on the same GPU: each held to its own limit
#   compute_shares     scripts/compute_share_check.py (issue 36): tiny, medium and big kernels and a small decoder
#                      LM alone at cap 30/50 against bare, two tenants at once (cap, share, 30 % beside unlimited),
#                      a share tenant's arrival, the launch path with no core limit; held when every target is met
# Progress goes to stderr; stdout gets exactly one JSON line: {"ok": ..., "gpu": ..., "versions": ...,
# "checks": {...}, "compute_shares": {figures, cases, ...}, "targets": {name: {value, bound, op, met}}}.
# The whole check is budgeted to TOTAL_S seconds (default 220, so that it ends within 4 minutes); compute cases
# that would not fit in what is left are skipped and named.  Exit status 0 when every check held.
set -euo pipefail

PY=${PYTHON:-python3}
LIMIT=${LIMIT:-1g}
TOTAL_S=${TOTAL_S:-220}
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM=$("$PY" -c 'from hami_devices.limiter import shim_library; print(shim_library("libhami_cuda.so"))')
WORK=$(mktemp -d /tmp/hami-cuda-check.XXXXXX)
chmod 700 "$WORK"
CHILDREN=()
cleanup() {
    for pid in "${CHILDREN[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "[cuda-limiter-check] $*" >&2; }

bytes_of() { "$PY" -c 'import sys; from hami_devices.limiter import parse_bytes; print(parse_bytes(sys.argv[1]))' "$1"; }
LIMIT_BYTES=$(bytes_of "$LIMIT")
LIMIT_MIB=$((LIMIT_BYTES >> 20))
log "shim $SHIM, limit $LIMIT ($LIMIT_BYTES bytes), budget $TOTAL_S s"

# Writes one check's JSON object to $WORK/<name>.json (the last line a probe printed, or a failure).
record() {
    local name=$1 out=$2
    local last
    last=$(printf '%s\n' "$out" | tail -n 1)
    if printf '%s' "$last" | "$PY" -c 'import json, sys; json.loads(sys.stdin.read())' 2>/dev/null; then
        printf '%s\n' "$last" >"$WORK/$name.json"
    else
        "$PY" -c 'import json, sys; print(json.dumps({"ok": False, "error": sys.argv[1][-400:]}))' "$out" \
            >"$WORK/$name.json"
    fi
    log "$name: $(cat "$WORK/$name.json")"
}

# Fills the GPU in 64 MiB tensors until OutOfMemoryError; argv: limit bytes, region file (or ""), hold seconds.
MEMORY_PROBE='
import json, os, sys, time, torch
limit, region, hold = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
free, total = torch.cuda.mem_get_info()  # initialises CUDA before the race below
go = os.environ.get("HAMI_CHECK_GO")
while go and not os.path.exists(go):
    time.sleep(0.001)
held, chunk, oom = [], 64 << 20, False
try:
    while len(held) * chunk <= 4 * limit:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    oom = True
allocated = len(held) * chunk
reserved = torch.cuda.memory_reserved()
torch.cuda.synchronize()
time.sleep(hold)
peak = None
if region:
    from hami_devices.limiter import Region
    with Region.open(region) as r:
        peak = r.device_usage()[0].memory_peak_bytes
ok = oom and total == limit and 0 < allocated <= limit and reserved <= limit and (peak is None or peak <= limit)
print(json.dumps({"ok": ok, "mem_get_info_total": total, "allocated": allocated, "torch_reserved": reserved,
                  "region_peak": peak, "oom": oom, "limit": limit}))
'

run_memory() {
    local name=$1
    shift
    local out
    out=$(env "$@" "$PY" -c "$MEMORY_PROBE" "$LIMIT_BYTES" "${REGION_FOR_PROBE:-}" 0 2>&1) || true
    record "$name" "$out"
}

GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader -i 0 2>/dev/null || echo unknown)
log "GPU 0: $GPU"

log "== memory_region: HAMI_DEVICE_MEMORY_LIMIT=$LIMIT with a region file"
REGION_FOR_PROBE="$WORK/a.region" run_memory memory_region \
    LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$WORK/a.region" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT"

log "== memory_hami_core: CUDA_DEVICE_MEMORY_LIMIT_0=$LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE"
REGION_FOR_PROBE="$WORK/b.region" run_memory memory_hami_core \
    LD_PRELOAD="$SHIM" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/b.region" CUDA_DEVICE_MEMORY_LIMIT_0="$LIMIT"

log "== memory_vmm: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate/cuMemMap)"
REGION_FOR_PROBE="$WORK/v.region" run_memory memory_vmm \
    LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$WORK/v.region" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT" \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

log "== memory_async: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (stream-ordered pools)"
REGION_FOR_PROBE="$WORK/p.region" run_memory memory_async \
    LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$WORK/p.region" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT" \
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync

# A process of the allocation holding 256 MiB (argv: MiB); prints READY and its GPU's UUID, then waits.
HOLDER='
import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)  # older PyTorch: NVML index 0
print("READY " + (f"GPU-{uuid}" if uuid else "0"), flush=True)
time.sleep(600)
'
log "== nvidia_smi and pynvml inside the limited environment, while a holder keeps 256 MiB"
SMI_ENV=(LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$WORK/s.region" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT")
mkfifo "$WORK/holder.out"
env "${SMI_ENV[@]}" "$PY" -c "$HOLDER" 256 >"$WORK/holder.out" 2>"$WORK/holder.err" &
CHILDREN+=($!)
exec 3<"$WORK/holder.out"
UUID=""
if read -r -t 120 ready uuid <&3 && [ "$ready" = READY ]; then UUID=$uuid; fi
if [ -z "$UUID" ]; then
    record nvidia_smi "holder did not start: $(cat "$WORK/holder.err" 2>/dev/null)"
    record pynvml "holder did not start"
else
    smi=$(env "${SMI_ENV[@]}" nvidia-smi -i "$UUID" --query-gpu=memory.total,memory.used \
        --format=csv,noheader,nounits 2>&1) || true
    record nvidia_smi "$("$PY" - "$smi" "$LIMIT_MIB" <<'PY'
import json, sys
text, limit = sys.argv[1], int(sys.argv[2])
try:
    total, used = (int(v.strip()) for v in text.strip().splitlines()[-1].split(","))
except ValueError:
    print(json.dumps({"ok": False, "error": text[-300:]}))
    raise SystemExit
print(json.dumps({"ok": total == limit and 256 <= used <= limit, "total_mib": total, "used_mib": used,
                  "limit_mib": limit}))
PY
)"
    nv=$(env "${SMI_ENV[@]}" "$PY" - "$UUID" "$LIMIT_BYTES" 2>&1 <<'PY'
import json, sys
import pynvml
uuid, limit = sys.argv[1], int(sys.argv[2])
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode()) if uuid.startswith("GPU-") else \
    pynvml.nvmlDeviceGetHandleByIndex(int(uuid))
info = pynvml.nvmlDeviceGetMemoryInfo(handle)
print(json.dumps({"ok": info.total == limit and 256 << 20 <= info.used <= limit, "total": info.total,
                  "used": info.used, "free": info.free, "limit": limit}))
PY
) || true
    record pynvml "$nv"
fi
exec 3<&-
kill "${CHILDREN[@]}" 2>/dev/null || true
CHILDREN=()

# Two processes allocating at once (they start together on a file's appearance, then hold for 3 s so the
# other's allocations meet theirs).  $1: check name; the other arguments: the two region files.
two_at_once() {
    local name=$1 region_a=$2 region_b=$3 shared=$4
    local go="$WORK/$name.go"
    env LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$region_a" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT" HAMI_CHECK_GO="$go" \
        "$PY" -c "$MEMORY_PROBE" "$LIMIT_BYTES" "" 3 >"$WORK/$name.a" 2>&1 &
    local a=$!
    env LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$region_b" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT" HAMI_CHECK_GO="$go" \
        "$PY" -c "$MEMORY_PROBE" "$LIMIT_BYTES" "" 3 >"$WORK/$name.b" 2>&1 &
    local b=$!
    sleep 5 # both have initialised CUDA and wait for the go
    touch "$go"
    wait "$a" || true
    wait "$b" || true
    record "$name" "$("$PY" - "$WORK/$name.a" "$WORK/$name.b" "$LIMIT_BYTES" "$shared" "$region_a" <<'PY'
import json, sys
a_path, b_path, limit, shared, region = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
runs = []
for path in (a_path, b_path):
    try:
        runs.append(json.loads(open(path).read().strip().splitlines()[-1]))
    except (OSError, ValueError, IndexError):
        print(json.dumps({"ok": False, "error": f"{path}: " + open(path).read()[-300:]}))
        raise SystemExit
got = [r["allocated"] for r in runs]
if shared:
    from hami_devices.limiter import Region
    with Region.open(region) as r:
        peak = r.device_usage()[0].memory_peak_bytes
    ok = all(r["oom"] for r in runs) and 0 < sum(got) <= limit and peak <= limit
    print(json.dumps({"ok": ok, "allocated": got, "together": sum(got), "region_peak": peak, "limit": limit}))
else:
    # Each allocation has its own limit: each gets close to it, and never past it.
    ok = all(r["oom"] and limit - (128 << 20) <= r["allocated"] <= limit for r in runs)
    print(json.dumps({"ok": ok, "allocated": got, "limit_each": limit}))
PY
)"
}

log "== shared_limit: two processes of one allocation ($LIMIT between them)"
two_at_once shared_limit "$WORK/shared.region" "$WORK/shared.region" 1
log "== two_allocations: two processes of two allocations on one GPU ($LIMIT each)"
two_at_once two_allocations "$WORK/one.region" "$WORK/two.region" 0

log "== compute_shares: scripts/compute_share_check.py, $((TOTAL_S - SECONDS)) s left"
"$PY" "$HERE/compute_share_check.py" --shim "$SHIM" --work "$WORK/compute" --python "$PY" \
    --budget-s "$((TOTAL_S - SECONDS - 5))" >"$WORK/compute_shares.out" || true

"$PY" - "$WORK" "$GPU" "$LIMIT_BYTES" <<'PY'
import json, sys
from pathlib import Path
work, gpu, limit = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
names = ["memory_region", "memory_hami_core", "memory_vmm", "memory_async", "nvidia_smi", "pynvml",
         "shared_limit", "two_allocations"]
checks = {}
for name in names:
    try:
        checks[name] = json.loads((work / f"{name}.json").read_text())
    except (OSError, ValueError):
        checks[name] = {"ok": False, "error": "did not run"}
try:
    shares = json.loads((work / "compute_shares.out").read_text().strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    shares = {"ok": False, "problems": {"compute_share_check.py": "printed no JSON line"}, "targets": {}}
targets = shares.pop("targets", {})
checks["compute_shares"] = {"ok": bool(shares.get("ok")), "targets_met": sum(t["met"] for t in targets.values()),
                            "targets": len(targets), "problems": shares.get("problems", {})}
print(json.dumps({"ok": all(c.get("ok") for c in checks.values()), "gpu": gpu, "limit_bytes": limit,
                  "versions": shares.pop("versions", None), "checks": checks, "compute_shares": shares,
                  "targets": targets}))
sys.exit(0 if all(c.get("ok") for c in checks.values()) else 1)
PY
