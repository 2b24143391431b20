#!/usr/bin/env bash
# Regenerate the kubelet plugin's protobuf modules from the .proto files beside them:
#   bash scripts/gen-dra-protos.sh [OUT_DIR]     (default: in place; needs grpcio-tools, in the [test] extra)
# tests/kubernetes/kubelet/test_protos.py runs it into a temporary directory and compares the descriptors.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PROTO_DIR=hami_devices/kubernetes/dra/plugin/proto
OUT=${1:-$PROTO_DIR}
mkdir -p "$OUT"
"$PYTHON" -m grpc_tools.protoc -I "$PROTO_DIR" --python_out="$OUT" --pyi_out="$OUT" \
    "$PROTO_DIR/dra_v1.proto" "$PROTO_DIR/pluginregistration_v1.proto"
