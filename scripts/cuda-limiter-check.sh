#!/usr/bin/env bash
# Short check of the CUDA limiter shim on a real NVIDIA host with PyTorch (never run by the tests).
#
#   scripts/cuda-limiter-check.sh            # 1 GiB memory limit, 30% compute limit
#   LIMIT=2g CORE=50 PYTHON=python3 scripts/cuda-limiter-check.sh
#
# It prints what it saw: torch.cuda.mem_get_info() under the limit, how far allocation got before the
# out-of-memory error, the same through HAMi-core's CUDA_DEVICE_MEMORY_LIMIT, and a matmul loop's speed
# with and without a compute limit.  Exit status 0 when every check held.
set -euo pipefail

PY=${PYTHON:-python3}
LIMIT=${LIMIT:-1g}
CORE=${CORE:-30}
SHIM=$("$PY" -c 'from hami_devices.limiter import shim_library; print(shim_library("libhami_cuda.so"))')
WORK=$(mktemp -d /tmp/hami-cuda-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "shim: $SHIM"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

MEMORY_PROBE='
import sys, torch
limit = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info: free={free} total={total} (limit {limit})")
held, chunk = [], 64 << 20
try:
    while True:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as exc:
    print(f"allocated {len(held) * chunk} bytes in {chunk >> 20} MiB tensors, then OutOfMemoryError")
    print("  " + str(exc).splitlines()[0][:160])
ok = total == limit and 0 < len(held) * chunk <= limit
print("memory check:", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
'

bytes_of() { "$PY" -c 'import sys; from hami_devices.limiter import parse_bytes; print(parse_bytes(sys.argv[1]))' "$1"; }
LIMIT_BYTES=$(bytes_of "$LIMIT")
status=0

echo "== HAMI_DEVICE_MEMORY_LIMIT=$LIMIT with a region file"
env LD_PRELOAD="$SHIM" HAMI_REGION_PATH="$WORK/a.region" HAMI_DEVICE_MEMORY_LIMIT="$LIMIT" \
    "$PY" -c "$MEMORY_PROBE" "$LIMIT_BYTES" || status=1
"$PY" - "$WORK/a.region" <<'PY'
import sys
from hami_devices.limiter import Region
with Region.open(sys.argv[1]) as region:
    u = region.device_usage()[0]
    print(f"region after exit: used={u.memory_used_bytes} peak={u.memory_peak_bytes} limit={u.memory_limit_bytes}")
PY

echo "== HAMi-core variables: CUDA_DEVICE_MEMORY_LIMIT_0=$LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE"
env LD_PRELOAD="$SHIM" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/b.region" CUDA_DEVICE_MEMORY_LIMIT_0="$LIMIT" \
    "$PY" -c "$MEMORY_PROBE" "$LIMIT_BYTES" || status=1

COMPUTE_PROBE='
import time, torch
a = torch.randn(4096, 4096, device="cuda")
for _ in range(5): a @ a
torch.cuda.synchronize()
n, start = 0, time.monotonic()
while time.monotonic() - start < 5:
    a @ a; n += 1
    if n % 8 == 0: torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"{n / (time.monotonic() - start):.1f}")
'
echo "== compute: matmul loop, unlimited vs HAMI_DEVICE_CORE_LIMIT=$CORE"
free_rate=$(env LD_PRELOAD="$SHIM" "$PY" -c "$COMPUTE_PROBE")
limited_rate=$(env LD_PRELOAD="$SHIM" HAMI_DEVICE_CORE_LIMIT="$CORE" HAMI_REGION_PATH="$WORK/c.region" \
    "$PY" -c "$COMPUTE_PROBE")
"$PY" - "$free_rate" "$limited_rate" "$CORE" <<'PY' || status=1
import sys
free, limited, core = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
share = 100 * limited / free
print(f"unlimited {free:.1f} matmul/s, limited {limited:.1f} matmul/s: {share:.1f}% of unlimited (target {core}%)")
print("compute check:", "OK" if abs(share - core) <= 10 else "FAILED (NVML utilization drives the feedback)")
sys.exit(0 if abs(share - core) <= 10 else 1)
PY
exit $status
