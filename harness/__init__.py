"""The test harness: local control plane, node emulator, conformance suite, drills.

It drives any DRA driver only through its sockets, the API server and a command line; it never imports
``fakedev``.
"""
