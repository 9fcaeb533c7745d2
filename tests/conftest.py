"""Top-level test configuration: pytester is used to test fakedev's own pytest plugin."""

pytest_plugins = ["pytester"]
