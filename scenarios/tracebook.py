"""A small vocabulary for writing kvtrace/1 scenarios by hand: one method per op, unit ids numbered in order.

`Trace` collects events (each validated by `sim.trace.stream.event_from_builtins` as it is added) and writes
the file with `TraceWriter`, so every scenario is a valid kvtrace/1 file. An event built with
``expect=RULE`` (or a tuple of rules) is one the replay must report: its (rule, event index, file line)
triples go into the header's ``meta.expect``; ``consequences`` (optional) declares how many findings error
recovery must report as consequences of those, not as violations (``meta.consequences``). With one header
line and no blank lines, the file line of event i is i + 2.

This module knows the kvtrace/1 line shapes and nothing of the store rules: what each scenario shows, and
why the values it observes are the ones the store contract requires, is written in `build.py`.
"""

from __future__ import annotations

from pathlib import Path

from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.sim.trace.stream import TraceWriter, event_from_builtins, header_from_builtins

HEADER_LINES = 1


def config(*, max_context=4096, max_concurrency=4, kv_profile="bf16", backend=None, kv_capacity=None,
           model=None, host_arena_bytes=0, kv_lease_growth=None, prefill_chunk=None) -> dict:
    """A kvtrace/1 header config; defaults: S = 4096, C = 4, bf16, no backend, one full-attention layer
    of 2 KV heads at D = 256, capacity M_max, no Host arena, no kv_lease_growth."""
    cfg = {"max_context": max_context, "max_concurrency": max_concurrency, "page_size": PAGE_SIZE,
           "kv_profile": kv_profile, "backend": backend or {"kind": "off"},
           "model": model or {"full_attention_layers": 1, "kv_heads": 2, "head_dim": 256},
           "host_arena_bytes": host_arena_bytes, "kv_lease_growth": kv_lease_growth}
    if kv_capacity is not None:
        cfg["kv_capacity"] = kv_capacity
    if prefill_chunk is not None:
        cfg["prefill_chunk"] = prefill_chunk
    return cfg


def _rules(expect) -> tuple:
    if expect is None:
        return ()
    return (expect,) if isinstance(expect, str) else tuple(expect)


class Trace:
    """One scenario: a header (config + meta.source [+ meta.expect]) and its events."""

    def __init__(self, name: str, source: str, cfg: dict):
        self.name = name
        self.source = source
        self.cfg = cfg
        self.events: list = []
        self.expect: list[dict] = []
        self.consequences: int | None = None  # declared: the consequences error recovery must suppress
        self._units = 0

    # -- plumbing ---------------------------------------------------------------------------------
    def ev(self, op: str, expect=None, **fields) -> int:
        """Append one event (fields as written on the wire; None values are left out)."""
        obj = {"op": op, **{k: v for k, v in fields.items() if v is not None}}
        self.events.append(event_from_builtins(obj))
        index = len(self.events) - 1
        for rule in _rules(expect):
            self.expect.append({"rule": rule, "event": index, "line": index + 1 + HEADER_LINES})
        return index

    def unit(self) -> str:
        self._units += 1
        return f"u{self._units}"

    @property
    def is_violation(self) -> bool:
        return bool(self.expect)

    def header(self):
        meta = {"source": self.source}
        if self.expect:
            meta["expect"] = self.expect
        if self.consequences is not None:
            meta["consequences"] = self.consequences
        return header_from_builtins({"format": "kvtrace/1", "config": self.cfg, "meta": meta})

    def write(self, path: Path) -> None:
        with TraceWriter(path, self.header()) as w:
            for event in self.events:
                w.write(event)

    # -- requests ---------------------------------------------------------------------------------
    def activate(self, seq, prompt, budget, src=None, keep_source=None, result=None, expect=None) -> int:
        return self.ev("activate", expect, seq=seq, prompt=prompt, budget=budget, **{"from": src},
                       keep_source=keep_source, result=result)

    def map(self, seq, tokens, pool="main", result=None, expect=None) -> int:
        return self.ev("map", expect, seq=seq, pool=pool, tokens=tokens, result=result)

    def grow(self, seq, result=None, expect=None) -> int:
        return self.ev("grow", expect, seq=seq, result=result)

    def cow(self, seq, block, pool="main", result=None, expect=None) -> int:
        return self.ev("cow", expect, seq=seq, pool=pool, block=block, result=result)

    # -- facts ------------------------------------------------------------------------------------
    def launch(self, unit, rows, expect=None) -> int:
        """rows: (seq, pool, a, b) writes [a, b) and reads [0, b); (seq, pool) reads only."""
        out = []
        for r in rows:
            out.append({"seq": r[0], "pool": r[1], "write": None if len(r) == 2 else [r[2], r[3]]})
        return self.ev("launch", expect, unit=unit, rows=out)

    def complete(self, unit, commits, expect=None) -> int:
        """commits: (seq, pool, frontier)."""
        return self.ev("complete", expect, unit=unit,
                       commit=[{"seq": s, "pool": p, "frontier": f} for s, p, f in commits])

    def fail(self, unit, expect=None) -> int:
        return self.ev("fail", expect, unit=unit)

    def step(self, seq, a, b, pool="main", commit=None) -> str:
        """One unit writing [a, b) of one row and committing `commit` (default b)."""
        u = self.unit()
        self.launch(u, [(seq, pool, a, b)])
        self.complete(u, [(seq, pool, b if commit is None else commit)])
        return u

    def advance(self, seq, a, b, pool="main", commit=None) -> str:
        """ensure_mapped_to_tokens(b), then one unit writing [a, b) and committing `commit` (default b)."""
        self.map(seq, b, pool)
        return self.step(seq, a, b, pool, commit)

    def prefill(self, seq, prompt, start=0, pool="main") -> str:
        """Map the prompt, then one unit writing [start, prompt) and committing the prompt."""
        return self.advance(seq, start, prompt, pool)

    def checkpoint(self, seq: str, prompt: int, ckpt: str, pages: list | None = None, budget: int = 0) -> None:
        """`seq` prefills `prompt` tokens (into the engine's `pages`, when given) and is retained as `ckpt`."""
        self.activate(seq, prompt, budget)
        self.map(seq, prompt, result=None if pages is None else {"ok": True, "pages": pages})
        self.step(seq, 0, prompt)
        self.finish(seq, retain=ckpt)

    def truncate(self, seq, frontier, pool="main", expect=None) -> int:
        return self.ev("truncate", expect, seq=seq, pool=pool, frontier=frontier)

    def finish(self, seq, retain=None, state_image=None, expect=None) -> int:
        return self.ev("finish", expect, seq=seq, retain=retain, state_image=state_image)

    def release(self, ckpt, expect=None) -> int:
        return self.ev("release", expect, ckpt=ckpt)

    def offload(self, ckpt, blocks, pool="main", offsets=None, expect=None) -> int:
        """D2H copies; `offsets`: the engine's Host placement, one per block (extension)."""
        result = None if offsets is None else {"ok": True, "offsets": list(offsets)}
        return self.ev("offload", expect, ckpt=ckpt, pool=pool, blocks=list(blocks), result=result)

    def drop_device(self, ckpt, blocks, pool="main", expect=None) -> int:
        return self.ev("drop_device", expect, ckpt=ckpt, pool=pool, blocks=list(blocks))

    def drop_host(self, ckpt, blocks, pool="main", expect=None) -> int:
        return self.ev("drop_host", expect, ckpt=ckpt, pool=pool, blocks=list(blocks))

    def xfer(self, xid, direction, ckpt, blocks, phase, pool="main", pages=None, offsets=None, expect=None) -> int:
        """One transfer phase; at `reserve`, `pages` (h2d destinations) / `offsets` (d2h Host placement) are the
        engine's choice (extension)."""
        result = None
        if pages is not None or offsets is not None:
            result = {"ok": True, **({"pages": list(pages)} if pages is not None else {}),
                      **({"offsets": list(offsets)} if offsets is not None else {})}
        return self.ev("xfer", expect, xfer=xid, dir=direction, ckpt=ckpt, pool=pool, blocks=list(blocks),
                       phase=phase, result=result)

    def xfer_all(self, xid, direction, ckpt, blocks, pool="main") -> None:
        """Every phase of one transfer, in the publication order."""
        for phase in ("reserve", "copy", "verify", "publish", "release_source"):
            self.xfer(xid, direction, ckpt, blocks, phase, pool)

    def pool(self, pool="main", allocated=None, reserved=None, available=None, expect=None) -> int:
        """Observe pool counters."""
        return self.ev("observe", expect, pool=pool, allocated=allocated, reserved=reserved, available=available)

    def ckpt(self, ckpt, pool="main", table=None, frontier=None, replicas=None, expect=None) -> int:
        """Observe a retained checkpoint (extension): its members' Device ids (-1: none), frontier, replicas."""
        return self.ev("observe", expect, ckpt=ckpt, pool=pool, table=None if table is None else list(table),
                       frontier=frontier, replicas=None if replicas is None else list(replicas))

    def row(self, seq, pool="main", table=None, frontier=None, expect=None) -> int:
        """Observe a sequence's row: the first len(table) block-table entries (-1 a hole) and/or its frontier."""
        return self.ev("observe", expect, seq=seq, pool=pool, table=None if table is None else list(table),
                       frontier=frontier)
