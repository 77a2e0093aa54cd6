"""``python -m gpu.devcheck`` on a machine without a device: says so, runs the NumPy checks, exits 0."""

from __future__ import annotations

import pytest

from kvsim.gpu import devcheck
from kvsim.gpu.backend import cupy_usable


def test_devcheck_without_device_runs_numpy_checks(capsys, monkeypatch):
    if cupy_usable():
        pytest.skip("with a device the devcheck is the device run itself (minutes)")
    monkeypatch.setattr(devcheck, "check_bench", lambda table, backend, contexts: table.add(
        "paged/dense", "-", "skipped in the test suite", "-", None))
    assert devcheck.main([]) == 0
    out = capsys.readouterr().out
    assert "no usable CUDA device" in out
    assert "accuracy     nvfp4" in out and "0 failed" in out
