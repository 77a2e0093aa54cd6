"""Shared fixtures for the gpu tests: every backend test runs on NumPy and, where a device is usable, CuPy."""

from __future__ import annotations

import pytest

from kvsim.gpu.backend import cupy_unusable_reason, cupy_usable


@pytest.fixture(params=["numpy", "cupy"])
def backend_name(request):
    """Backend name; the CuPy case skips unless CuPy imports and a CUDA device runs a probe kernel."""
    if request.param == "cupy":
        pytest.importorskip("cupy")
        if not cupy_usable():
            pytest.skip(cupy_unusable_reason())
    return request.param
