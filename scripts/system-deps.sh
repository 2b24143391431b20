#!/usr/bin/env bash
# System packages the tests need that pip cannot provide: the Prometheus server (Debian's
# `prometheus`), which tests/observability starts on a loopback port to scrape the exporter.
# Idempotent: does nothing when the binaries are already there.  Needs root and apt-get to install.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "system-deps: prometheus is missing and there is no apt-get to install it" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
# The package lists may be absent on a fresh machine: install, and update the lists once if that fails.
if ! $SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null; then
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null
