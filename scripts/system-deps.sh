#!/usr/bin/env bash
# System packages the tests need that pip cannot provide:
#   - the Prometheus server (Debian's `prometheus`), which tests/observability starts on a loopback port to
#     scrape the exporter;
#   - the PostgreSQL server (Debian's `postgresql`: initdb and postgres under /usr/lib/postgresql/<version>/bin),
#     which tests/ledger starts in a temporary folder on a loopback port to run the ledger contract suite.
# Idempotent: does nothing when the binaries are already there.  Needs root and apt-get to install.
set -euo pipefail

have_postgresql() {
    if command -v initdb >/dev/null && command -v postgres >/dev/null; then
        return 0
    fi
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

missing=()
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    missing+=(prometheus)
fi
if ! have_postgresql; then
    missing+=(postgresql)
fi
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "system-deps: ${missing[*]} missing and there is no apt-get to install them" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
# The package lists may be absent on a fresh machine: install, and update the lists once if that fails.
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null && have_postgresql
