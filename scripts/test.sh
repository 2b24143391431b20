#!/usr/bin/env bash
# The whole test suite from a clean checkout (arguments go to pytest: `bash scripts/test.sh -q tests/core`).
#
#   .venv         the project, editable, with the extras the tests need, and the system packages they
#                 use (scripts/system-deps.sh: the Prometheus and PostgreSQL servers). It is also the
#                 environment of the README's first command, so nothing test-only (the example vendor
#                 plugin) goes in it.
#   .whl/         `python -m build`: the sdist, and the wheel built from it with the C parts compiled in.
#   .venv-plugin  that wheel with the [conformance] extra, and the example third-party plugin, built
#                 against the wheel's region API as a plugin author builds it (its shim lands in
#                 examples/vendor-plugin/hami_example_accel/libs/, where the project's tests find it).
#   .venv-airflow Airflow (the [airflow] extra) and the project, editable: Airflow pins many dependencies,
#                 so it has a venv of its own; tests/integrations/airflow drive its `airflow` command.
#
# Then pytest in .venv (tests/packaging installs the wheel without extras in a fresh venv and runs the
# CLI there), and, as the plugin author's CI would, the plugin's own test command in .venv-plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# Byte-code caches (ignored by git): without them each pytest process re-rewrites the assertions of every module
# of the distribution its plugin comes from (about 500), and every CLI a test starts compiles what it imports.
unset PYTHONDONTWRITEBYTECODE
quietly() {  # run a set-up step; show its output only when it fails
    local log
    log=$(mktemp)
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "scripts/test.sh: failed: $*" >&2
        return 1
    fi
    rm -f "$log"
}

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
quietly .venv/bin/python -m pip install --upgrade pip setuptools wheel cffi
quietly .venv/bin/python -m pip install -e '.[test,kubernetes,ray,observability,precision,spark,postgresql,docs]'
# earlier versions of this script installed the example plugin here: take it out of the user's environment
if .venv/bin/python -m pip show -q hami-example-accel >/dev/null 2>&1; then
    quietly .venv/bin/python -m pip uninstall -y hami-example-accel
fi
bash scripts/system-deps.sh

# The Go programs of the Kubernetes tests (the kubelet's plugin manager, etcd, kube-apiserver, kube-scheduler: built
# from the Go module proxy, cached in ~/.cache/hami-devices) compile in the background from here on, on the core the set-up and
# pytest leave idle; a test that needs one waits for it. Only when the run includes those tests.
PREBUILD_PID=""
if command -v go >/dev/null && { [ $# -eq 0 ] || [[ "$*" == *kubernetes* ]]; }; then
    nice -n 10 .venv/bin/python -m tests.kubernetes.prebuild >.prebuild.log 2>&1 &
    PREBUILD_PID=$!
fi

rm -rf .whl
quietly .venv/bin/python -m build --outdir .whl .
WHEEL=$(ls "$PWD"/.whl/hami_devices-*.whl)

if [ ! -x .venv-plugin/bin/python ]; then
    "$PYTHON" -m venv .venv-plugin
    quietly .venv-plugin/bin/python -m pip install --upgrade pip setuptools wheel
fi
quietly .venv-plugin/bin/python -m pip install --force-reinstall --no-deps "$WHEEL"
quietly .venv-plugin/bin/python -m pip install "$WHEEL[conformance]"
if [ -f examples/vendor-plugin/pyproject.toml ]; then
    # no build isolation: the plugin builds its limiter shim against the hami-devices installed here,
    # a build requirement no package index serves in this repository (see the plugin guide)
    quietly .venv-plugin/bin/python -m pip install --no-build-isolation -e ./examples/vendor-plugin
fi

if [ ! -x .venv-airflow/bin/python ]; then
    "$PYTHON" -m venv .venv-airflow
    quietly .venv-airflow/bin/python -m pip install --upgrade pip setuptools wheel cffi
fi
quietly .venv-airflow/bin/python -m pip install -e '.[airflow,conformance]'

status=0
if [ $# -eq 0 ]; then
    # Most tests wait on processes and servers they start: two workers overlap those waits. Each file stays on
    # one worker (loadfile), so its module fixtures start once. The tests that measure shares of wall-clock time
    # run after, alone, where nothing else takes the cores they measure.
    HAMI_TEST_WHEEL="$WHEEL" .venv/bin/python -m pytest -n 2 --dist loadfile -m "not timing" || status=$?
    HAMI_TEST_WHEEL="$WHEEL" .venv/bin/python -m pytest -m timing || status=$?
else
    HAMI_TEST_WHEEL="$WHEEL" .venv/bin/python -m pytest "$@" || status=$?
fi
if [ -n "$PREBUILD_PID" ]; then
    wait "$PREBUILD_PID" || { echo "scripts/test.sh: building the Kubernetes tests' Go programs failed:" >&2; cat .prebuild.log >&2; }
fi
[ "$status" -eq 0 ] || exit "$status"
if [ -f examples/vendor-plugin/pyproject.toml ]; then
    (cd examples/vendor-plugin && ../../.venv-plugin/bin/python -m pytest -q)
fi
