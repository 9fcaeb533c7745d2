"""A read-only OCI registry on 127.0.0.1 that serves the real node's images under the names users write.

It mirrors nothing: it serves the OCI layout archives it is given (the busybox stand-in, the pause image, archives
added at run time), and containerd reaches it for every registry host through a ``_default/hosts.toml``. Modules:
``names`` (the name table, pure), ``archive`` (reading an OCI layout tarball), ``server`` (HTTP), ``hosts``
(containerd's configuration, pure), ``control`` (starting, feeding and stopping the process); ``python -m
harness.realnode.registry`` runs the server.
"""
