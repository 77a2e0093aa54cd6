"""The distribution: a wheel built from the checkout installs under the one `kvsim` namespace (no top-level
`sim`, `spec`, `gpu` or `kvmodel`), and its `kvsim` runs outside the checkout, finding the scenarios as
package data.

Offline and under about a minute: the wheel is built without build isolation (the `test` extra brings
setuptools and wheel) and installed with --no-deps into a fresh venv (made with --system-site-packages);
the running interpreter's site-packages are appended to that venv through a .pth file for the
dependencies (a .pth line adds a path without running the .pth files inside it, so this checkout's
editable install stays invisible there).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("sim", "spec", "gpu", "kvmodel", "scenarios")


def _run(cmd, cwd, timeout=120, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(kw.pop("env", {}))
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: an in-tree build would leave build/ in the checkout (and could reuse it)
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in TOP_LEVEL:
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(tmp / "dist"), str(src)], cwd=tmp, timeout=180)
    assert build.returncode == 0, build.stderr[-2000:]
    wheels = list((tmp / "dist").glob("kvsim-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp).stdout.strip())
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    inst = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                 str(wheels[0])], cwd=tmp, timeout=180)
    assert inst.returncode == 0, inst.stderr[-2000:]
    return tmp, env_dir, purelib


def test_the_wheel_installs_one_namespace(installed):
    tmp, env_dir, purelib = installed
    assert (purelib / "kvsim" / "sim" / "cli" / "__init__.py").exists()
    assert (purelib / "kvsim" / "scenarios" / "violations").is_dir()
    assert not [n for n in TOP_LEVEL if (purelib / n).exists()]
    probe = _run([str(env_dir / "bin" / "python"), "-c",
                  "import importlib.util, json, kvsim.sim.cli as c; "
                  f"print(json.dumps([c.__file__] + [importlib.util.find_spec(n) is None for n in {TOP_LEVEL!r}]))"],
                 cwd=tmp)
    where, *absent = json.loads(probe.stdout)
    assert Path(where).is_relative_to(purelib) and all(absent), probe.stdout + probe.stderr


def test_kvsim_runs_from_the_wheel_outside_the_checkout(installed):
    tmp, env_dir, _ = installed
    kvsim = str(env_dir / "bin" / "kvsim")
    env = {"KVSIM_REPORTS": str(tmp / "reports")}
    check = _run([kvsim, "check", "--out", str(tmp / "out")], cwd=tmp, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "PASS — every scenario behaved as declared" in " ".join(check.stdout.split())
    assert json.loads((tmp / "out" / "kvreport.json").read_text())["stats"]["check"]["violation_scenarios"] > 10
    rules = _run([kvsim, "rules", "--json"], cwd=tmp, env=env)
    assert rules.returncode == 0, rules.stderr
    assert any(r["id"] == "UNIT-1" for r in json.loads(rules.stdout))
