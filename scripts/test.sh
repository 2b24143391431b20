#!/usr/bin/env bash
# The whole test suite from a clean checkout: makes .venv, installs the project
# (which builds the cffi limiter module, the preload shims and the fake vendor
# libraries), installs the example third-party plugin, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel cffi
.venv/bin/python -m pip install -q -e '.[test]'
if [ -f examples/vendor-plugin/pyproject.toml ]; then
    .venv/bin/python -m pip install -q -e ./examples/vendor-plugin
fi
exec .venv/bin/python -m pytest "$@"
