"""The package's import graph (read from the source with ast, imports inside functions included) has no
cycle, and no module imports a private name (`from x import _name`) from another module. Imports under
`if TYPE_CHECKING:` are annotations for the type checker, never executed: they are no edge of the graph -- except
inside `sim.peers`, where a module never imports the module that owns it, not even for annotations (the
cachetrace contract's parts read it through `view`)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvmodel", "spec", "sim", "gpu", "scenarios")  # installed as kvsim.<folder>


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["kvsim", *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict, typing: bool = False) -> list[tuple[str, str, int, list[str]]]:
    """(imported module, how, line, names) for every import statement of one module (``typing``: those under
    ``if TYPE_CHECKING:`` too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, str, int, list[str]]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)} if not typing else set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, "import", node.lineno, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:  # `from pkg import submodule` depends on the submodule, not on pkg's __init__
                sub = f"{base}.{a.name}"
                out.append((sub, "from", node.lineno, []) if sub in modules else (base, "from", node.lineno, [a.name]))
    return out


def _graph(typing: bool = False):
    modules = _modules()
    g = nx.DiGraph()
    private = []
    for name, path in modules.items():
        g.add_node(name)
        for target, _how, line, names in _imports(name, path, modules, typing):
            if target in modules and target != name:
                g.add_edge(name, target, line=line)
                private += [f"{path.relative_to(ROOT)}:{line}: from {target} import {n}" for n in names
                            if n.startswith("_") and not n.startswith("__")]
    return g, private


def test_the_graph_covers_the_package():
    g, _ = _graph()
    assert {"kvsim.sim.replay", "kvsim.spec.checking", "kvsim.kvmodel.store.units", "kvsim.sim.cli.check"} <= set(g)
    assert g.has_edge("kvsim.sim.replay", "kvsim.spec.checking")


def test_no_import_cycle():
    g, _ = _graph()
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_no_private_name_imported_across_modules():
    _, private = _graph()
    assert not private, private


def test_no_peer_module_imports_its_owner():
    """Inside sim.peers no cycle even through annotations: a part never imports the module that owns it (the
    cachetrace contract imports its parts; they read it through `cachetrace.view`, never `cachetrace.contract`)."""
    g, _ = _graph(typing=True)
    peers = g.subgraph(n for n in g if n.startswith("kvsim.sim.peers."))
    cycles = sorted(sorted(c) for c in nx.simple_cycles(peers))
    assert not cycles, "import cycles in sim.peers (annotations included): " + "; ".join(
        " -> ".join(c) for c in cycles[:5])
    owner = "kvsim.sim.peers.cachetrace.contract"
    parts = [m for m in g.successors(owner) if m.startswith("kvsim.sim.peers.cachetrace.")]
    assert {"kvsim.sim.peers.cachetrace.host_tier", "kvsim.sim.peers.cachetrace.state_group"} <= set(parts)
    assert not [m for m in parts if g.has_edge(m, owner)]
    assert all(g.has_edge(m, "kvsim.sim.peers.cachetrace.view") for m in parts if m.rpartition(".")[2] in
               ("host_tier", "state_group", "store_policy", "capacity", "l3_reads", "eviction", "hits"))


def test_no_peer_module_over_600_lines():
    """sim/peers keeps rooms a reader takes in whole: no module (drivers and sample generators included) over 600
    lines -- a module that grows past it is split by concern."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "sim" / "peers").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long


def test_layers_point_one_way():
    """The model knows nothing of spec, sim or gpu; gpu nothing of the model, spec or sim; spec nothing of sim."""
    g, _ = _graph()
    forbidden = {"kvsim.kvmodel": ("kvsim.spec", "kvsim.sim", "kvsim.gpu"),
                 "kvsim.gpu": ("kvsim.kvmodel", "kvsim.spec", "kvsim.sim"), "kvsim.spec": ("kvsim.sim",)}
    bad = [f"{a} -> {b}" for a, b in g.edges for layer, others in forbidden.items()
           if a.startswith(layer + ".") and b.startswith(others)]
    assert not bad, bad


def test_the_test_sees_a_cycle_and_a_private_import(tmp_path, monkeypatch):
    """The checks above can fail: a two-module cycle and a private import in a scratch package."""
    pkg = tmp_path / "sim"
    pkg.mkdir()
    (pkg / "a.py").write_text("from kvsim.sim.b import _helper\n")
    (pkg / "b.py").write_text("def f():\n    from kvsim.sim import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGES", ("sim",))
    g, private = _graph()
    assert list(nx.simple_cycles(g)) and private == ["sim/a.py:1: from kvsim.sim.b import _helper"]
