"""The abstract oracle on the store contract's worked examples, and its independence from the model."""

from __future__ import annotations

import ast
from pathlib import Path

from kvsim.sim.fuzz import oracle as oracle_mod
from kvsim.sim.fuzz.oracle import Facts, Oracle


def fresh(capacity=64, S=2048, C=2, growth=None, backend=None, K=0):
    pools = {"main": capacity} if backend is None else {"main": capacity, backend: capacity}
    return Oracle(Facts(S, C, pools, {p: 1000 for p in pools}, 10_000, backend, K, growth, 0))


def commit(o, seq, n, base=0):
    """Map, launch and complete `n` tokens of `seq` (every pool), with made-up content keys."""
    for pool, s in o.seqs[seq].spaces.items():
        o.map(seq, pool, s.frontier + n)
    rows = [(seq, pool, (s.frontier, s.frontier + n)) for pool, s in o.seqs[seq].spaces.items()]
    o.launch("u", rows)
    o.complete("u", [(seq, p, w[1]) for _, p, w in rows],
                {(seq, p): [base + i for i in range(w[0], w[1])] for _, p, w in rows})


def test_fork_at_1000_shares_15_pages_and_copies_the_40_column_tail():
    o = fresh()
    o.activate("a", o.plan_activate(1000, 0, None, True), None, True)
    commit(o, "a", 1000)
    o.finish("a", "k")
    assert o.counters("main") == {"allocated": 16, "reserved": 0, "available": 48}
    plan = o.plan_activate(1000, 0, "k", True)
    o.activate("b", plan, "k", True)
    b, k = o.seqs["b"].spaces["main"], o.ckpts["k"]["main"]
    assert b.content == k.content and b.frontier == 1000  # never rounded to 960
    assert [x is y for x, y in zip(b.blocks, k.blocks)] == [True] * 15 + [False]
    assert b.blocks[15].cols == 40
    assert o.allocated("main") == 17


def test_move_hands_the_checkpoint_over_and_truncate_returns_leases_to_the_reservation():
    o = fresh()
    o.activate("a", o.plan_activate(100, 100, None, True), None, True)
    commit(o, "a", 150)
    o.finish("a", "k")
    o.activate("b", o.plan_activate(150, 50, "k", False), "k", False)
    assert "k" not in o.ckpts and o.allocated("main") == 3
    assert o.seqs["b"].spaces["main"].entitlement == 4
    o.truncate("b", "main", 10)
    s = o.seqs["b"].spaces["main"]
    assert len(s.blocks) == 1 and s.entitlement == 4 and s.content == list(range(10))
    assert o.counters("main") == {"allocated": 1, "reserved": 3, "available": 60}


def test_host_copy_is_current_until_the_content_changes():
    o = fresh()
    o.activate("a", o.plan_activate(64, 0, None, True), None, True)
    commit(o, "a", 64)
    o.finish("a", "k")
    o.offload("k", "main", [0])
    blk = o.ckpts["k"]["main"].blocks[0]
    assert blk.host_current and o.host_used == 1000
    o.drop_device("k", "main", [0])
    assert o.allocated("main") == 0
    o.activate("b", o.plan_activate(64, 0, "k", False), "k", False)  # Move restores from the Host copy
    assert blk.dev and o.allocated("main") == 1
    o.truncate("b", "main", 10)
    assert not blk.host_current  # a cut private page: the Host copy is stale


def test_oracle_never_reads_the_model():
    tree = ast.parse(Path(oracle_mod.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
               [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and "kvmodel" in m]
