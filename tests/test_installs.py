"""Every usual install of kvsim runs its commands: pip's default editable mode (an import hook, no folders),
setuptools' strict editable mode (a tree of links), a plain `pip install .`, a built wheel, and `uv pip install
-e .`, on each Python 3.11-3.13 this machine has. Each install is of a fresh copy of the checkout (the files a
clone would hold), into its own venv, and `kvsim check` and `kvsim rules` then run from another folder.

Nothing of kvsim may depend on how its files were installed (DESIGN §10 "Installs"): the rule catalogue
finds its checkers' source through the import system's finders, never through a package's folders.

Kept offline where it can be and short: kvsim itself is installed with --no-deps (pip without build isolation);
its dependencies come from
one venv per Python (this test's own site-packages for the running Python; for another Python a venv built
once from pyproject's dependencies and kept under ~/.cache/kvsim-test-installs), appended to each install's
venv through a .pth file (a .pth line adds a path without running the .pth files inside it, so no other
kvsim install is visible there). uv comes from PyPI into that cache once. A Python that is absent, or a
package index that cannot be reached, skips its cases and says why. In the slow tier (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("KVSIM_TEST_INSTALLS", Path.home() / ".cache" / "kvsim-test-installs"))
PYTHONS = ("3.11", "3.12", "3.13")
MODES = ("pip-editable", "pip-editable-strict", "pip", "wheel", "uv-editable")


def _run(cmd, cwd, timeout=600, env=None):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    clean.update(env or {})
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=timeout)


def _base_python(version: str) -> str | None:
    """An interpreter of that version that is not inside a venv (a venv's python makes venvs of its base)."""
    if sys.version_info[:2] == tuple(map(int, version.split("."))):
        return getattr(sys, "_base_executable", None) or sys.executable
    found = shutil.which(f"python{version}")
    if found and _run([found, "-c", "pass"], cwd="/").returncode == 0:
        return found
    pyenv = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / f"{version}.*" / "bin" / f"python{version}")))
    return pyenv[-1] if pyenv else None


@contextlib.contextmanager
def _locked(name: str):
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers share the cache: one builds, the others wait
        yield


def _purelib(py: Path) -> Path:
    return Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd="/").stdout.strip())


def _dependency_paths(version: str, base: str) -> list[str]:
    """Folders holding kvsim's dependencies for that Python: this test's own for the running one; else a venv
    built once (keyed by the dependency list) in the cache."""
    if sys.version_info[:2] == tuple(map(int, version.split("."))):
        return site.getsitepackages()
    deps = [*tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"], "setuptools>=68", "wheel"]
    key = hashlib.sha256("\n".join(deps).encode()).hexdigest()[:12]
    home = CACHE / f"deps-{version}-{key}"
    with _locked(f"deps-{version}"):
        if not (home / "ok").exists():
            shutil.rmtree(home, ignore_errors=True)
            made = _run([base, "-m", "venv", home], cwd=CACHE)
            assert made.returncode == 0, made.stderr[-2000:]
            got = _run([home / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", *deps],
                       cwd=CACHE, timeout=900)
            if got.returncode != 0:
                pytest.skip(f"python{version}: kvsim's dependencies could not be installed: {got.stderr[-300:]}")
            (home / "ok").write_text("")
    return [str(_purelib(home / "bin" / "python"))]


def _uv() -> str:
    found = shutil.which("uv")
    if found:
        return found
    home = CACHE / "uv"
    with _locked("uv"):
        if not (home / "bin" / "uv").exists():
            shutil.rmtree(home, ignore_errors=True)
            venv.EnvBuilder(with_pip=True).create(home)
            got = _run([home / "bin" / "python", "-m", "pip", "install", "-q", "uv"], cwd=CACHE)
            if got.returncode != 0:
                pytest.skip(f"uv could not be installed from the package index: {got.stderr[-300:]}")
    return str(home / "bin" / "uv")


def _fresh_copy(dest: Path) -> Path:
    """The files a clone of this checkout holds (tracked and new, not ignored), copied to `dest`."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no clone to install from")
    for name in filter(None, listed.stdout.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _install(mode: str, base: str, deps: list[str], tmp: Path) -> Path:
    src = _fresh_copy(tmp / "src")
    env_dir = tmp / "venv"
    made = _run([base, "-m", "venv", env_dir], cwd=tmp)
    assert made.returncode == 0, made.stderr[-2000:]
    py = env_dir / "bin" / "python"
    (_purelib(py) / "zz_kvsim_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    # pip builds with the setuptools the dependencies' folder holds (no isolated build env to fill: seconds
    # each); uv builds as its users' do, in its own isolated env
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-build-isolation"]
    if mode == "pip-editable":
        steps = [pip + ["-e", src]]
    elif mode == "pip-editable-strict":
        steps = [pip + ["-e", src, "--config-settings", "editable_mode=strict"]]
    elif mode == "pip":
        steps = [pip + [src]]
    elif mode == "wheel":
        steps = [[py, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", src]]
    else:
        steps = [[_uv(), "pip", "install", "-q", "--no-deps", "--python", py, "-e", src]]
    for cmd in steps:
        done = _run(cmd, cwd=tmp, timeout=900)
        assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
    if mode == "wheel":
        wheels = sorted((tmp / "dist").glob("kvsim-*.whl"))
        assert len(wheels) == 1, wheels
        done = _run(pip + [wheels[0]], cwd=tmp)
        assert done.returncode == 0, done.stderr[-2000:]
    return env_dir / "bin" / "kvsim"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", PYTHONS)
def test_kvsim_runs_however_it_is_installed(version, mode, tmp_path):
    base = _base_python(version)
    if base is None:
        pytest.skip(f"python{version} is not on this machine")
    deps = _dependency_paths(version, base)
    kvsim = _install(mode, base, deps, tmp_path)
    elsewhere = tmp_path / "a" / "b" / "c"  # another folder, not the source copy
    elsewhere.mkdir(parents=True)
    env = {"KVSIM_REPORTS": str(tmp_path / "reports")}
    check = _run([kvsim, "check", "--out", tmp_path / "out"], cwd=elsewhere, env=env)
    assert check.returncode == 0, f"{mode} on {version}: {check.stdout[-1500:]}{check.stderr[-1500:]}"
    assert "PASS — every scenario behaved as declared" in " ".join(check.stdout.split())
    rules = _run([kvsim, "rules", "--json"], cwd=elsewhere, env=env)
    assert rules.returncode == 0, f"{mode} on {version}: {rules.stderr[-1500:]}"
    listed = json.loads(rules.stdout)
    assert {"UNIT-1", "TS-ADM-2", "PEER-11"} <= {r["id"] for r in listed}
    table = _run([kvsim, "rules"], cwd=elsewhere, env=env)
    assert table.returncode == 0 and "TS-ADM-2" in table.stdout, table.stderr[-1500:]
    explained = _run([kvsim, "explain", "PEER-9", "--json"], cwd=elsewhere, env=env)  # its checkers, found anyhow
    assert explained.returncode == 0, f"{mode} on {version}: {explained.stderr[-1500:]}"
    places = [w["where"] for w in json.loads(explained.stdout)["where"]]
    assert places and all(p.startswith("sim/peers/") and p.rsplit(":", 1)[1].isdigit() for p in places), places
