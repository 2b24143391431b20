#!/usr/bin/env bash
# Mutation testing of the one rule table (hami_devices/rules), its evaluator and the queues' rules
# (hami_devices/queueing/tree.py) against the oracle tests: `bash scripts/mutation.sh` prints "killed K of N"
# and each mutant that survived; `--json` prints one JSON object instead.  What is mutated and which tests
# judge it is [tool.mutmut] in pyproject.toml.  Long (about 20 minutes on two cores): a script, not a CI
# step.  It exits 1 when fewer than 95 % of the mutants are killed (`--require PERCENT` changes that).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q -e '.[test,mutation]'
rm -rf mutants  # a run over an older tree would report its mutants
.venv/bin/mutmut run --max-children "${MUTATION_JOBS:-2}" >mutants.log 2>&1 || {
    tail -n 40 mutants.log >&2
    echo "scripts/mutation.sh: mutmut run failed (log: mutants.log)" >&2
    exit 1
}
.venv/bin/mutmut results --all true | .venv/bin/python scripts/mutation_report.py "$@"
