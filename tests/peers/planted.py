"""Planting a bug into an engine at run time, for the tests only: a ``sitecustomize.py`` in a temporary folder
put first on the engine process's PYTHONPATH. It patches one engine module right after that module is first
imported (an import hook: importing the engine at interpreter start would print onto the driver's protocol
channel before the driver redirects it), so the shared engine venvs are never edited."""

from __future__ import annotations

import textwrap
from pathlib import Path

_HOOK = '''
import importlib.abc, importlib.util, sys


class _Plant(importlib.abc.MetaPathFinder):
    """Runs patch(module) right after {module!r} is first executed."""

    def find_spec(self, name, path, target=None):
        if name != {module!r}:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Plant())
'''


def plant(folder: Path, module: str, patch: str) -> dict[str, str]:
    """Write the sitecustomize planting ``patch`` (source of ``def patch(module): ...``) into ``module``; returns
    the environment to run the engine with."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(textwrap.dedent(patch) + _HOOK.format(module=module))
    return {"PYTHONPATH": str(folder)}
