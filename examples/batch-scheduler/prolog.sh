#!/usr/bin/env bash
# Prolog on the node that runs a job (Slurm's TaskProlog, or a plain launcher's first step).
#
# The scheduler committed the job's allocation to the shared ledger and passed its id to the job
# (for Slurm: sbatch --export=ALL,HAMI_HANDLE_ID=<id>).  This makes it real on this node: its limiter
# regions in this node's region folder, and the environment with this node's paths.  It prints
# "export NAME=value" lines, which Slurm's TaskProlog applies to the job's tasks and a launcher can
# `eval`; with HAMI_ENV_FILE set it also writes them there.  Safe to run twice.
set -euo pipefail
: "${HAMI_HANDLE_ID:?the allocation id the scheduler committed}"
cli="${HAMI_DEVICES_CLI:-hami-devices}"
args=(prepare "$HAMI_HANDLE_ID" --export)
[[ -n "${HAMI_LEDGER:-}" ]] && args+=(--ledger "$HAMI_LEDGER")      # else the CLI's default ledger
[[ -n "${NODE_NAME:-}" ]] && args+=(--node-name "$NODE_NAME")       # else the config's node-name, the host name
env_lines="$($cli "${args[@]}")"
if [[ -n "${HAMI_ENV_FILE:-}" ]]; then
    umask 077
    printf '%s\n' "$env_lines" > "$HAMI_ENV_FILE"
fi
printf '%s\n' "$env_lines"
