#!/usr/bin/env bash
# Epilog on the node once the job's processes are gone (Slurm's Epilog, or a launcher's last step):
# removes the allocation's limiter regions from this node.  The scheduler releases the allocation in the
# ledger (engine.release) on its own host.  Refused, naming the pids, while a workload process still uses
# them; HAMI_FORCE=1 removes them anyway.  Safe to run twice.
set -euo pipefail
: "${HAMI_HANDLE_ID:?the allocation id the scheduler committed}"
cli="${HAMI_DEVICES_CLI:-hami-devices}"
args=(unprepare "$HAMI_HANDLE_ID")
[[ -n "${NODE_NAME:-}" ]] && args+=(--node-name "$NODE_NAME")
[[ "${HAMI_FORCE:-0}" == 1 ]] && args+=(--force)
"$cli" "${args[@]}"
if [[ -n "${HAMI_ENV_FILE:-}" ]]; then
    rm -f "$HAMI_ENV_FILE"
fi
