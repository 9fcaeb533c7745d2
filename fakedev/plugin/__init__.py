"""The kubelet plugin: registration, DRA v1/v1beta1 and health gRPC services on Unix sockets."""
