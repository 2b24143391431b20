#!/usr/bin/env bash
# The whole test suite from a clean checkout: makes .venv, installs the project
# (which builds the cffi limiter module, the preload shims and the fake vendor
# libraries) and the example third-party plugin, and the system packages the tests need
# (scripts/system-deps.sh: the Prometheus server), then runs pytest on the project
# and, as a plugin author's CI would, the plugin's own test command in its folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel cffi
.venv/bin/python -m pip install -q -e '.[test,kubernetes,ray,observability]'
bash scripts/system-deps.sh
if [ -f examples/vendor-plugin/pyproject.toml ]; then
    # no build isolation: the plugin builds its limiter shim against this hami-devices (a build
    # requirement that no package index here serves)
    .venv/bin/python -m pip install -q --no-build-isolation -e ./examples/vendor-plugin
fi
.venv/bin/python -m pytest "$@"
if [ -f examples/vendor-plugin/pyproject.toml ]; then
    (cd examples/vendor-plugin && ../../.venv/bin/python -m pytest -q)
fi
