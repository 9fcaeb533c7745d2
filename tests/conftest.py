"""Top-level test configuration: pytester is used to test fakedev's own pytest plugin; fixtures shared by the
integration and privileged tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES
from tests.helpers import EXAMPLE_DRIVER, device_class_body, driver_is

pytest_plugins = ["pytester"]


@pytest.fixture
def example_class(kube: KubeClient, unique_name: str) -> Iterator[str]:
    """A DeviceClass named after the test, selecting every device of the gpu.example.com driver."""
    kube.create(DEVICE_CLASSES, device_class_body(name=unique_name, expression=driver_is(EXAMPLE_DRIVER)))
    yield unique_name
    kube.delete(DEVICE_CLASSES, unique_name)
