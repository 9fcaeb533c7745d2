"""The fakedev OCI image: a Debian 12 root filesystem, fakedev and its wheels, assembled by umoci (``make image``)."""
