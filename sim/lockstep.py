"""Lockstep: the physical implementation (gpu/) driven beside the store model, checked as it goes.

`kvsim replay --lockstep` gives the replay an observer that, for every event the model applied:
- replays the page-payload copies the model's transaction required (`KVStore.take_effects()`: COW tails and
  `cow` copies of committed columns, Host restores, D2H copies into a packed Host buffer) and scribbles
  over every page whose lease ended, so a missing copy or restore cannot pass by reading stale bytes;
- publishes the model's block-table mirror rows that the event touched into the physical table matrix;
- for a launch, writes the unit's positions through the table row with content derived from the model's
  content keys (`kvmodel.store.address_space.content_key`), through the persistent codec;
- remembers which physical columns it touched (written positions, copy and restore destinations, scribbled
  pages): the *dirty* columns.
After every completed unit it checks what changed (store contract §8, "Growing-cache Ops 直接消费 paged
views"), at a cost proportional to what the units touched, not to the contexts:
- CONS-1: each active row's physical table equals the model's mirror over the committed blocks, and the
  consumer's read domain never passes the committed frontier;
- CONS-2: the read domain has no hole and no aliased page (correctness may not depend on physical id order
  or contiguity, and nothing is gathered to a contiguous context: attention stages one tile at a time);
- CONS-3: every dirty column inside an active sequence's committed domain is bit-exact against the codec
  applied to the content of its key. An untouched column cannot change, so this covers the read domain.
After the first completed unit, every `audit_units` units after it and at the end of the trace the *audit* re-reads
every active
sequence's whole committed content page by page through its table (CONS-1..3, the check the incremental one
must agree with) and runs paged attention over every active row against the FP64 oracle within the kernel
tolerance (CONS-3). `incremental=False` leaves only the audits (tests compare the two).
This module may know both the model and the physical implementation; neither knows the other.
"""

from __future__ import annotations

from collections import defaultdict
from time import process_time

import numpy as np

from kvsim.gpu.accuracy import FP32_KERNEL_REL_L2
from kvsim.gpu.append import kv_append_batch
from kvsim.gpu.attention import attention
from kvsim.gpu.backend import to_host
from kvsim.gpu.codecs import PARTS, encode
from kvsim.gpu.content import content_kv, expected_stored, stored_mismatches
from kvsim.gpu.oracle import oracle_for_pool, rel_l2
from kvsim.gpu.planes import HEAD_MAJOR, PagedKVPool
from kvsim.gpu.transfer import copy_pages, pack_pages, unpack_pages
from kvsim.kvmodel.store.address_space import KEY_STRIDE, MASK64
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.kvmodel.store.effects import CopyColumns, DeviceToHost, HostMove, HostToDevice, Relabel
from kvsim.kvmodel.store.errors import Finding, InvariantError

GQA_GROUP = 2  # query heads per KV head in the lockstep's attention checks
ATTENTION_COLUMNS = 8  # at most this many committed columns per row are attended per audit
AUDIT_UNITS = 2048  # completed units between two whole-content audits (and one at the end of a trace)
P = PAGE_SIZE


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

    def __init__(self, store, profile: str | None = None, audit_units: int = AUDIT_UNITS,
                 incremental: bool = True) -> None:
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
        self.completed: list | None = None  # rows of the unit completed by the last event
        self.rng = np.random.default_rng(0)
        self._poisons: dict[int, np.ndarray] = {}
        self.audit_units, self.incremental = audit_units, incremental
        self.units = 0  # completed units seen
        # pool -> physical page id -> [lo, hi) columns touched since the last check
        self.dirty: dict[str, dict[int, list[int]]] = {name: {} for name in self.pools}
        self.timing: dict[str, float] = defaultdict(float)  # CPU seconds per phase (bench lockstep)
        self._written: dict[str, list] = {name: [] for name in self.pools}  # (keys, [{part: K/V}]) per append

    # -- following the model --------------------------------------------------------------------------
    def applied(self, ev, outcome, index: int, line: int) -> None:
        t0 = process_time()
        st = self.st
        for eff in st.take_effects():
            if isinstance(eff, HostMove):  # a guessed Host placement moved: its payload moves with it
                if eff.old in self.host:
                    self.host[eff.new] = self.host.pop(eff.old)
                continue
            pool = self.pools[eff.pool]
            if isinstance(eff, CopyColumns):
                copy_pages(pool, [eff.src], [eff.dst], columns=eff.columns)
                self._touch(eff.pool, eff.dst, 0, P if eff.columns is None else eff.columns)
            elif isinstance(eff, HostToDevice):
                unpack_pages(pool, self.host[eff.host_offset], [eff.dst])
                self._touch(eff.pool, eff.dst, 0, P)
            elif isinstance(eff, DeviceToHost):
                self.host[eff.host_offset] = np.array(pack_pages(pool, [eff.src]), copy=True)
            elif isinstance(eff, Relabel):  # the engine's ids adopted for guessed leases: payloads follow
                pairs = [(a, b) for a, b in eff.pairs if a >= 0]
                if pairs:
                    buf = np.array(pack_pages(pool, [a for a, _ in pairs]), copy=True)
                    unpack_pages(pool, buf, [b for _, b in pairs])
                    for _, b in pairs:
                        self._touch(eff.pool, b, 0, P)
            else:  # FreeLease: scribble over its payload so a missing copy or restore cannot pass
                unpack_pages(pool, self._poison(pool), [eff.page])
                self._touch(eff.pool, eff.page, 0, P)
        for space in st.t_spaces:
            if space.active:
                st.t_rows[(space.pool, space.row)] = None
        for pool_name, row in st.t_rows:
            self._publish(pool_name, row)
        op = ev.op
        if op == "launch":
            by_pool: dict[str, list] = {}
            for r in ev.rows:
                if r.write is not None and r.write[1] > r.write[0]:
                    space = st.space_of(r.seq, r.pool)
                    a, b = r.write
                    by_pool.setdefault(r.pool, []).append((space.row, a, b, write_keys(space.token, a, b)))
                    self._touch_written(r.pool, space.row, a, b)
            for name, rows in by_pool.items():
                self._append(name, rows)
        self.completed = list(ev.commit) if op == "complete" else None
        self.timing["follow"] += process_time() - t0

    def _append(self, pool_name: str, rows: list) -> None:
        """One batched append of a unit's writes into one pool: content of every row's keys, every layer.

        The K/V content of the written keys is kept (`_written`) until the next check, which reuses it
        for the keys it derives from the model's pages when they are the same keys (content is a pure
        function of the key); any other key's expected content is computed afresh.
        """
        pool = self.pools[pool_name]
        keys = np.concatenate([k for *_, k in rows])
        width = max(b - a for _, a, b, _ in rows)
        positions = np.zeros((len(rows), width), dtype=np.int64)
        index = np.zeros((len(rows), width), dtype=np.int64)
        valid = np.zeros(len(rows), dtype=np.int64)
        table_rows = np.zeros(len(rows), dtype=np.int64)
        off = 0
        for i, (row, a, b, _) in enumerate(rows):
            positions[i, :b - a] = np.arange(a, b)
            index[i, :b - a] = np.arange(off, off + b - a)
            valid[i], table_rows[i] = b - a, row
            off += b - a
        per_layer = []
        for layer in range(pool.layers):
            k = content_kv(keys, layer, "k", pool.kv_heads, pool.head_dim)
            v = content_kv(keys, layer, "v", pool.kv_heads, pool.head_dim)
            kv_append_batch(pool.batch_view(layer), table_rows, positions, valid, k[index], v[index])
            per_layer.append({"k": k, "v": v})
        self._written[pool_name].append((keys, per_layer))

    def _touch(self, pool: str, page: int, lo: int, hi: int) -> None:
        d = self.dirty[pool]
        span = d.get(page)
        if span is None:
            d[page] = [lo, hi]
        else:
            span[0], span[1] = min(span[0], lo), max(span[1], hi)

    def _touch_written(self, pool: str, row: int, a: int, b: int) -> None:
        table = self.st.tables[pool].table[row]
        for block in range(a // P, (b - 1) // P + 1):
            page = table[block]
            if page >= 0:
                base = block * P
                self._touch(pool, page, max(a, base) - base, min(b, base + P) - base)

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
        """After a completed unit: the incremental checks, and the audit every `audit_units` units."""
        if self.completed is None:
            return []
        self.units += 1
        findings: list[Finding] = []
        if self.incremental:
            t0 = process_time()
            findings += self.check_touched()
            self.timing["incremental"] += process_time() - t0
        if (self.units - 1) % self.audit_units == 0:  # the first unit, then every `audit_units`
            findings += self.audit()
        self.completed = None
        return findings

    def audit(self) -> list[Finding]:
        """The whole-content audit: every active row re-read page by page, attention against the oracle."""
        t0 = process_time()
        st = self.st
        findings: list[Finding] = []
        for bundle in st.bundles.values():
            for name, space in bundle.spaces.items():
                findings += self.check_row(bundle.seq, name, space)
        st.cov.add("CONS-1", 1, 1)
        self.timing["audit"] += process_time() - t0
        t0 = process_time()
        for name in self.pools:
            rows = [(b.seq, b.spaces[name].committed) for b in st.bundles.values()
                    if name in b.spaces and b.spaces[name].committed > 0]
            if rows:
                findings += self.check_attention(name, rows)
        self.timing["attention"] += process_time() - t0
        for d in self.dirty.values():
            d.clear()
        for w in self._written.values():
            w.clear()
        return findings

    def check_touched(self) -> list[Finding]:
        """CONS-1/2 on every active row's table, CONS-3 on the dirty columns of committed domains."""
        st, cov = self.st, self.st.cov
        findings: list[Finding] = []
        items: dict[str, list] = {name: [] for name in self.pools}
        for bundle in st.bundles.values():
            for name, space in bundle.spaces.items():
                bad = self._check_table(bundle.seq, name, space)
                if bad:
                    findings.append(bad)
                    continue
                dirty = self.dirty[name]
                if not dirty or not space.committed:
                    continue
                n = space.committed
                mirror = st.tables[name].table[space.row]
                for b in range(-(-n // P)):
                    span = dirty.get(mirror[b])
                    if span is None:
                        continue
                    cols = min(P, n - b * P)
                    lo, hi = span[0], min(span[1], cols)
                    if lo < hi:
                        items[name].append((bundle.seq, space, b, mirror[b], lo, hi))
        cov.add("CONS-1", 1, 1)
        for name, its in items.items():
            if its:
                findings += self._content_mismatches(name, its)
        for d in self.dirty.values():
            d.clear()
        for w in self._written.values():
            w.clear()
        return findings

    def _check_table(self, seq: str, pool_name: str, space) -> Finding | None:
        cov = self.st.cov
        n = space.committed
        blocks = -(-n // P)
        phys = self.pools[pool_name].table_row(space.row)[:blocks]
        mirror = self.st.tables[pool_name].table[space.row][:blocks]
        cov.check("CONS-1", exercised=blocks > 0)
        ctx = {"seq": seq, "pool": pool_name, "row": space.row}
        if phys.tolist() != list(mirror):
            return Finding("CONS-1", f"physical table row {space.row} {phys.tolist()} differs from the membership "
                           f"mirror {list(mirror)} over the committed blocks", ctx)
        cov.check("CONS-2", exercised=blocks > 1)
        if blocks and ((phys < 0).any() or np.unique(phys).size != blocks):
            return Finding("CONS-2", f"read domain [0, {n}) maps holes or aliased pages: {phys.tolist()}", ctx)
        return None

    def _content_mismatches(self, pool_name: str, items: list) -> list[Finding]:
        """Bit-exact comparison of dirty committed columns, batched over every item of one pool."""
        pool, cov = self.pools[pool_name], self.st.cov
        keys = np.concatenate([content_keys(space.pages[b], b * P, hi)[lo:] for _, space, b, _, lo, hi in items])
        owner = np.concatenate([np.full(hi - lo, i) for i, (_, _, _, _, lo, hi) in enumerate(items)])
        cov.check("CONS-3", exercised=True)
        head_major = pool.order == HEAD_MAJOR
        reuse = self._reusable(pool_name, keys)
        bad_items: dict[int, str] = {}
        for layer in range(pool.layers):
            planes = pool.planes[layer]
            want = self._expected(pool_name, layer, keys, reuse)
            for spec in pool.schema:
                plane = planes[spec.name]
                slabs = [to_host(plane[:, page, lo:hi] if head_major else plane[page, :, lo:hi])
                         for _, _, _, page, lo, hi in items]
                got = np.concatenate(slabs, axis=1).view(spec.dtype).transpose(1, 0, 2)
                t = keys.size
                g = np.ascontiguousarray(got).reshape(t, -1).view(np.uint8)
                w = np.ascontiguousarray(want[spec.name]).reshape(t, -1).view(np.uint8)
                for k in np.flatnonzero((g != w).any(axis=1)):
                    i = int(owner[k])
                    if i not in bad_items:
                        _, _, b, _, lo, _ = items[i]
                        col = lo + int(k - np.flatnonzero(owner == i)[0])
                        bad_items[i] = f"layer {layer} {spec.name}: position {b * P + col} differs"
        out = []
        for i in sorted(bad_items):
            seq, space, *_ = items[i]
            out.append(Finding("CONS-3", f"committed content is not bit-exact: {bad_items[i]}",
                               {"seq": seq, "pool": pool_name, "row": space.row}))
        return out

    def _reusable(self, pool_name: str, keys: np.ndarray):
        """Indices of `keys` into the content written since the last check, or None if any key is new."""
        chunks = self._written[pool_name]
        if not chunks:
            return None
        written = chunks[0][0] if len(chunks) == 1 else np.concatenate([c[0] for c in chunks])
        order = np.argsort(written, kind="stable")
        at = np.searchsorted(written, keys, sorter=order)
        at = np.minimum(at, written.size - 1)
        idx = order[at]
        if not np.array_equal(written[idx], keys):
            return None
        return idx

    def _expected(self, pool_name: str, layer: int, keys: np.ndarray, reuse) -> dict[str, np.ndarray]:
        pool = self.pools[pool_name]
        if reuse is None:
            return expected_stored(pool.profile, layer, keys, pool.kv_heads, pool.head_dim)
        chunks = self._written[pool_name]
        out = {}
        for part in PARTS:
            content = (chunks[0][1][layer][part] if len(chunks) == 1
                       else np.concatenate([c[1][layer][part] for c in chunks]))
            codes, scales = encode(pool.profile, part, content[reuse])
            out[f"{part}_code"] = codes
            if scales is not None:
                out[f"{part}_scale"] = scales
        return out

    def check_row(self, seq: str, pool_name: str, space) -> list[Finding]:
        """The audit of one row: its table (CONS-1/2) and its whole committed content (CONS-3)."""
        bad = self._check_table(seq, pool_name, space)
        if bad:
            return [bad]
        n = space.committed
        if not n:
            return []
        self.st.cov.check("CONS-3", exercised=True)
        mismatches = stored_mismatches(self.pools[pool_name], space.row, n, committed_keys(space), limit=3)
        if mismatches:
            return [Finding("CONS-3", f"committed content is not bit-exact: {'; '.join(mismatches)}",
                            {"seq": seq, "pool": pool_name, "row": space.row})]
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
