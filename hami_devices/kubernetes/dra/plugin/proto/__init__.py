"""Protobuf modules of the kubelet's DRA v1 and plugin-registration v1 APIs, generated from the ``.proto`` files
beside them by ``scripts/gen-dra-protos.sh`` (committed, so installing needs no code generator)."""
