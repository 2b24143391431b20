"""The DRA kubelet plugin: the kubelet's DRA gRPC service and plugin registration, over ``NodePlugin``
(needs the ``[kubernetes]`` extra: grpcio and protobuf). ``hami-devices dra plugin`` runs it."""
