"""Array backend: CuPy when it imports and a CUDA device is usable, NumPy otherwise.

The environment variable ``KVSIM_BACKEND`` (``numpy`` | ``cupy``) overrides the automatic choice; asking
for ``cupy`` where CuPy or a device is missing is an error, never a silent fallback. CuPy is the optional
extra ``gpu``; nothing else in the project requires it.

This module knows nothing of codecs, planes or the store model: it only answers "which array namespace,
and how do arrays cross between host and device".
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np

ENV_VAR = "KVSIM_BACKEND"
NAMES = ("numpy", "cupy")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot be used on this machine."""


@dataclass(frozen=True)
class Backend:
    """One array namespace plus the host/device crossings the rest of ``gpu`` needs."""

    name: str
    xp: ModuleType

    @property
    def is_device(self) -> bool:
        return self.name == "cupy"

    def asarray(self, a, dtype=None):
        """Host (or same-backend) array -> this backend's array."""
        return self.xp.asarray(a, dtype=dtype)

    def asnumpy(self, a) -> np.ndarray:
        """This backend's array -> NumPy array (a copy on a device, the array itself on NumPy)."""
        if self.is_device:
            return self.xp.asnumpy(a)
        return np.asarray(a)

    def synchronize(self) -> None:
        """Wait for queued device work (timing); a no-op on NumPy."""
        if self.is_device:
            self.xp.cuda.get_current_stream().synchronize()


@functools.cache
def _cupy_probe() -> tuple[ModuleType | None, str]:
    """Import CuPy and prove a device works (count > 0 and a tiny kernel runs); never raises."""
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except Exception as exc:  # ImportError, or a broken CUDA installation raising at import
        return None, f"CuPy does not import ({type(exc).__name__}: {exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy imports but reports no CUDA device"
        probe = cupy.arange(4, dtype=cupy.float32) * 2
        if float(probe.sum().get()) != 12.0:
            return None, "CuPy device probe returned a wrong sum"
    except Exception as exc:
        return None, f"CuPy imports but no CUDA device is usable ({type(exc).__name__}: {exc})"
    return cupy, "ok"


def cupy_usable() -> bool:
    """True when CuPy imports and a CUDA device runs a probe kernel."""
    return _cupy_probe()[0] is not None


def cupy_unusable_reason() -> str:
    """Why CuPy cannot be used here ("ok" when it can)."""
    return _cupy_probe()[1]


def available_backends() -> tuple[str, ...]:
    """Backend names usable on this machine, NumPy first (for test parametrisation)."""
    return ("numpy", "cupy") if cupy_usable() else ("numpy",)


def get_backend(name: str | None = None) -> Backend:
    """Return the backend ``name``, else ``$KVSIM_BACKEND``, else CuPy when usable, else NumPy.

    Raises ValueError for an unknown name and BackendUnavailable when CuPy is asked for but unusable.
    """
    if name is None:
        name = os.environ.get(ENV_VAR) or None
    if name is None:
        name = "cupy" if cupy_usable() else "numpy"
    name = name.strip().lower()
    if name not in NAMES:
        raise ValueError(f"unknown array backend {name!r}; expected one of {', '.join(NAMES)}")
    if name == "numpy":
        return Backend("numpy", np)
    cupy, reason = _cupy_probe()
    if cupy is None:
        raise BackendUnavailable(f"backend 'cupy' requested but unusable: {reason}")
    return Backend("cupy", cupy)


def resolve(backend: Backend | str | None) -> Backend:
    """Accept a Backend, a backend name or None (automatic choice)."""
    if isinstance(backend, Backend):
        return backend
    return get_backend(backend)


def is_device_array(a) -> bool:
    """True for a CuPy array (checked by type, without importing CuPy)."""
    return type(a).__module__.split(".")[0] == "cupy"


def to_host(a) -> np.ndarray:
    """Any array-like (NumPy, CuPy, list, scalar) -> NumPy array (no copy for NumPy input)."""
    if is_device_array(a):
        return a.get()
    return np.asarray(a)


def backend_of(array) -> Backend:
    """The backend an existing array lives on (NumPy for ndarray, CuPy otherwise)."""
    if isinstance(array, np.ndarray):
        return Backend("numpy", np)
    module = type(array).__module__.split(".")[0]
    if module == "cupy":
        return get_backend("cupy")
    raise TypeError(f"not a NumPy or CuPy array: {type(array).__name__}")
