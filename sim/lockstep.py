"""Lockstep: the physical implementation (gpu/) driven beside the store model, checked after every unit.

`kvsim replay --lockstep` gives the replay an observer that, for every event the model applied:
- replays the page-payload copies the model's transaction required (`KVStore.take_effects()`: COW tails and
  `cow` copies of committed columns, Host restores, D2H copies into a packed Host buffer) and scribbles
  over every page whose lease ended, so a missing copy or restore cannot pass by reading stale bytes;
- publishes the model's block-table mirror rows that the event touched into the physical table matrix;
- for a launch, writes the unit's positions through the table row with content derived from the model's
  content keys (`kvmodel.store.address_space.content_key`), through the persistent codec.
After every completed unit it checks (store contract §8, "Growing-cache Ops 直接消费 paged views"):
- CONS-1: each active row's physical table equals the model's mirror over the committed blocks, and the
  consumer's read domain never passes the committed frontier;
- CONS-2: the read domain has no hole and no aliased page (correctness may not depend on physical id order
  or contiguity, and nothing is gathered to a contiguous context: attention stages one tile at a time);
- CONS-3: every active sequence's committed content is bit-exact, read back page by page through the
  table, against the codec applied to the content of its keys; and paged attention over the rows of the
  unit equals the FP64 oracle over the decoded K/V within the kernel tolerance.
This module may know both the model and the physical implementation; neither knows the other.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.accuracy import FP32_KERNEL_REL_L2
from kvsim.gpu.attention import attention
from kvsim.gpu.content import append_content, stored_mismatches
from kvsim.gpu.oracle import oracle_for_pool, rel_l2
from kvsim.gpu.planes import PagedKVPool
from kvsim.gpu.transfer import copy_pages, pack_pages, unpack_pages
from kvsim.kvmodel.store.address_space import KEY_STRIDE, MASK64
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.kvmodel.store.effects import CopyColumns, DeviceToHost, HostMove, HostToDevice, Relabel
from kvsim.kvmodel.store.errors import Finding, InvariantError

GQA_GROUP = 2  # query heads per KV head in the lockstep's attention checks
ATTENTION_COLUMNS = 8  # at most this many committed columns per row are attended per unit


def content_keys(page, base: int, cols: int) -> np.ndarray:
    """Content keys of the first `cols` committed columns of `page` (block base position `base`)."""
    tokens = np.empty(cols, dtype=np.uint64)
    segs = page.segments
    for i, (start, token) in enumerate(segs):
        end = segs[i + 1][0] if i + 1 < len(segs) else cols
        if start < cols:
            tokens[start:min(end, cols)] = np.uint64(token)
    pos = np.arange(base, base + cols, dtype=np.uint64)
    return tokens ^ (pos * np.uint64(KEY_STRIDE))


def committed_keys(space) -> np.ndarray:
    """Keys of positions [0, committed) of an address space, block by block from its member pages."""
    out = []
    c = space.committed
    for b, page in enumerate(space.pages):
        cols = min(PAGE_SIZE, c - b * PAGE_SIZE)
        if cols <= 0:
            break
        out.append(content_keys(page, b * PAGE_SIZE, cols))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)


def write_keys(token: int, a: int, b: int) -> np.ndarray:
    pos = np.arange(a, b, dtype=np.uint64)
    return np.uint64(token & MASK64) ^ (pos * np.uint64(KEY_STRIDE))


class Lockstep:
    """One trace's physical pools, Host buffer and checks.

    `profile` runs the Main/MTP planes under another closed profile than the trace's header (the model's
    accounting, which depends on byte sizes, still follows the header): every trace can exercise every
    codec. Host slices are kept per offset, so their size need not match the model's stride then.
    """

    def __init__(self, store, profile: str | None = None):
        self.st = store
        store.record_effects()
        cfg = store.config
        self.pools = {}
        for name in store.pool_names:
            g = store.geometry[name]
            chosen = profile or cfg.kv_profile
            pool = PagedKVPool("bf16" if name == "draft_full" else chosen, g.layers, g.kv_heads, g.head_dim,
                               g.pages, order=g.order, rows=cfg.max_concurrency, logical_pages=store.L)
            if profile is None and pool.page_bytes != g.page_bytes:
                raise InvariantError("physical PageBytes equal the model's",
                                     f"{name}: physical {pool.page_bytes} != model {g.page_bytes}")
            self.pools[name] = pool
        self.host: dict[int, np.ndarray] = {}  # Host arena slices by offset (packed HostKVPageLayout)
        self.completed = None  # rows of the unit completed by the last event
        self.rng = np.random.default_rng(0)
        self._poisons: dict[int, np.ndarray] = {}

    # -- following the model --------------------------------------------------------------------------
    def applied(self, ev, outcome, index: int, line: int) -> None:
        st = self.st
        for eff in st.take_effects():
            if isinstance(eff, HostMove):  # a guessed Host placement moved: its payload moves with it
                if eff.old in self.host:
                    self.host[eff.new] = self.host.pop(eff.old)
                continue
            pool = self.pools[eff.pool]
            if isinstance(eff, CopyColumns):
                copy_pages(pool, [eff.src], [eff.dst], columns=eff.columns)
            elif isinstance(eff, HostToDevice):
                unpack_pages(pool, self.host[eff.host_offset], [eff.dst])
            elif isinstance(eff, DeviceToHost):
                self.host[eff.host_offset] = np.array(pack_pages(pool, [eff.src]), copy=True)
            elif isinstance(eff, Relabel):  # the engine's ids adopted for guessed leases: payloads follow
                pairs = [(a, b) for a, b in eff.pairs if a >= 0]
                if pairs:
                    buf = np.array(pack_pages(pool, [a for a, _ in pairs]), copy=True)
                    unpack_pages(pool, buf, [b for _, b in pairs])
            else:  # FreeLease: scribble over its payload so a missing copy or restore cannot pass
                unpack_pages(pool, self._poison(pool), [eff.page])
        for space in st.t_spaces:
            if space.active:
                st.t_rows[(space.pool, space.row)] = None
        for pool_name, row in st.t_rows:
            self._publish(pool_name, row)
        op = ev.op
        if op == "launch":
            for r in ev.rows:
                if r.write is not None and r.write[1] > r.write[0]:
                    space = st.space_of(r.seq, r.pool)
                    a, b = r.write
                    append_content(self.pools[r.pool], space.row, np.arange(a, b), write_keys(space.token, a, b))
        self.completed = list(ev.commit) if op == "complete" else None

    def _poison(self, pool) -> np.ndarray:
        buf = self._poisons.get(id(pool))
        if buf is None:
            buf = self._poisons[id(pool)] = np.full(pool.page_bytes, 0x5A, dtype=np.uint8)
        return buf

    def _publish(self, pool_name: str, row: int) -> None:
        pool = self.pools[pool_name]
        mirror = self.st.tables[pool_name].table[row]
        pool.publish(row, 0, mirror)

    # -- checks ----------------------------------------------------------------------------------------
    def check(self, index: int, line: int) -> list[Finding]:
        if self.completed is None:
            return []
        st, cov = self.st, self.st.cov
        findings: list[Finding] = []
        for bundle in st.bundles.values():
            for name, space in bundle.spaces.items():
                findings += self.check_row(bundle.seq, name, space)
        cov.add("CONS-1", 1, 1)
        for name in self.pools:
            rows = [(c.seq, c.frontier) for c in self.completed if c.pool == name and c.frontier > 0]
            if rows:
                findings += self.check_attention(name, rows)
        self.completed = None
        return findings

    def check_row(self, seq: str, pool_name: str, space) -> list[Finding]:
        cov = self.st.cov
        pool = self.pools[pool_name]
        n = space.committed
        blocks = -(-n // PAGE_SIZE)
        ctx = {"seq": seq, "pool": pool_name, "row": space.row}
        phys = pool.table_row(space.row)[:blocks]
        mirror = self.st.tables[pool_name].table[space.row][:blocks]
        cov.check("CONS-1", exercised=blocks > 0)
        if list(phys) != list(mirror):
            return [Finding("CONS-1", f"physical table row {space.row} {list(phys)} differs from the membership "
                            f"mirror {list(mirror)} over the committed blocks", ctx)]
        cov.check("CONS-2", exercised=blocks > 1)
        if (phys < 0).any() or len(set(phys.tolist())) != len(phys):
            return [Finding("CONS-2", f"read domain [0, {n}) maps holes or aliased pages: {phys.tolist()}", ctx)]
        if not n:
            return []
        cov.check("CONS-3", exercised=True)
        bad = stored_mismatches(pool, space.row, n, committed_keys(space), limit=3)
        if bad:
            return [Finding("CONS-3", f"committed content is not bit-exact: {'; '.join(bad)}", ctx)]
        return []

    def check_attention(self, pool_name: str, rows: list) -> list[Finding]:
        st, pool = self.st, self.pools[pool_name]
        bsz, w = len(rows), ATTENTION_COLUMNS
        q = self.rng.standard_normal((bsz, w, pool.kv_heads * GQA_GROUP, pool.head_dim)).astype(np.float32)
        positions = np.zeros((bsz, w), dtype=np.int64)
        valid = np.zeros(bsz, dtype=np.int32)
        table_rows = np.zeros(bsz, dtype=np.int32)
        for i, (seq, frontier) in enumerate(rows):
            space = st.space_of(seq, pool_name)
            cols = min(w, frontier)
            positions[i, :cols] = np.arange(frontier - cols, frontier)
            positions[i, cols:] = frontier - 1  # inert columns repeat the last position
            valid[i] = cols
            table_rows[i] = space.row
        findings = []
        for layer in range(pool.layers):
            got = attention(pool, layer, q, table_rows, positions, valid)
            want = oracle_for_pool(pool, layer, q, table_rows, positions, valid)
            err = rel_l2(got, want)
            inert = any(np.any(got[i, valid[i]:] != 0) for i in range(bsz))
            self.st.cov.check("CONS-3", exercised=True)
            if err > FP32_KERNEL_REL_L2 or inert:
                why = "inert columns are not exactly zero" if inert else f"rel-L2 {err:.3g} > {FP32_KERNEL_REL_L2}"
                findings.append(Finding("CONS-3", f"{pool_name} layer {layer}: paged attention differs from the FP64 "
                                        f"oracle: {why}", {"pool": pool_name, "layer": layer,
                                                           "seqs": [s for s, _ in rows]}))
        return findings


def lockstep_factory(store, profile: str | None = None) -> Lockstep:
    return Lockstep(store, profile)
