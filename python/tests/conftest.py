"""Shared fixtures: the devices present (cpu, opencl:0, gpuemu:0, vulkan:0;
absent ones skip) and a torch reference with fixed thread counts."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import anygrad as ag  # noqa: E402

DEFAULT_DEVICES = "cpu,opencl:0,gpuemu:0,vulkan:0"
WANTED = [d for d in os.environ.get("ANYGRAD_TEST_DEVICES", DEFAULT_DEVICES).split(",") if d]
PRESENT = set(ag.devices())

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    torch = None


def pytest_generate_tests(metafunc):
    if "dev" in metafunc.fixturenames:
        metafunc.parametrize("dev", WANTED, indirect=True)


@pytest.fixture
def dev(request):
    if request.param not in PRESENT:
        pytest.skip("%s is not present on this machine" % request.param)
    return request.param


@pytest.fixture
def th():
    if torch is None:
        pytest.skip("torch is not installed")
    return torch
