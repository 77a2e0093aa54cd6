"""The SGLang driver's hybrid part counts exactly the paths kvsim lists for a --kv-groups run (no engine venv: the
driver's scripts are read, never imported -- they import SGLang)."""

import ast
from pathlib import Path

from kvsim.sim.peers.engines import engine_paths
from kvsim.sim.peers.kv_groups import parse_kv_groups
from kvsim.sim.peers.sglang import paths

HYBRID = Path(paths.__file__).with_name("hybrid.py")


def _literal(name: str):
    tree = ast.parse(HYBRID.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    return ast.literal_eval(node.value)


def test_the_driver_counts_the_paths_kvsim_lists():
    assert set(_literal("BASE_PATHS")) == set(paths.UNIFIED_PATHS)
    assert {k: set(v) for k, v in _literal("GROUP_PATHS").items()} == {k: set(v) for k, v in
                                                                       paths.GROUP_PATHS.items()}
    listed = engine_paths("sglang", parse_kv_groups("full:16,sliding:16:128,mamba:64"))
    assert {"g0.hit", "g1.window_drop", "g2.cow", "g2.checkpoint", "preemption"} <= set(listed)
    assert "hit_evictable" not in listed  # the plain RadixCache's paths are not a hybrid run's
    assert "hit_evictable" in engine_paths("sglang")
