"""The plan-record bugs of the reference TokenSpeed scheduler (`ts_reference.FAULTS` that change what a plan shows):
``FaultyTsRef`` is the reference with one of them planted. Each fires once, at its first occasion, on the plan
record it corrupts, and records (rule, line) in ``fired``; the scheduler's own state stays what the correct
plan made it, so later plans show the consequences a real bug of that kind would leave. Written from seed 002
and cachetrace/1's record shapes; imports nothing of kvsim but its sibling reference.
"""

from __future__ import annotations

from .ts_reference import TsRef

# faults that change a table: the page gauge the scheduler computed no longer matches the rows shown (TS-POOL-5), and
# a fresh page renamed or dropped from the plan leaves a page the scheduler took looking free and empty (TS-ADM-4)
TABLE_FAULTS = {"null-block", "block-beyond", "fresh-aliased", "row-hole", "hit-other-prefix", "hit-whole-prompt",
                "hit-same-plan", "state-hit-wrong-state", "decode-state-hit"}


class FaultyTsRef(TsRef):
    def _corrupt(self, rec: dict, ext: list, first_hits: dict) -> None:
        name = self.fault
        if name is None or self.fired or self.plan_no < self.fault_plan:
            return
        fn = getattr(self, "_" + name.replace("-", "_"), None)
        if fn is not None:
            fn(rec, ext, first_hits)

    # -- tables -------------------------------------------------------------------------------------------------------
    def _fresh_slot(self, rec: dict):
        fresh = rec.get("zero", {}).get("full", [])
        for rid, row in rec.get("tables", {}).get("full", {}).items():
            for i, b in enumerate(row):
                if b in fresh:
                    return rid, row, i, fresh
        return None

    def _renumber(self, rec: dict, to: int) -> None:
        got = self._fresh_slot(rec)
        if got is not None and self._fire(self.fault or ""):
            _rid, row, i, fresh = got
            fresh[fresh.index(row[i])] = to
            row[i] = to

    def _null_block(self, rec: dict, ext: list, first_hits: dict) -> None:
        self._renumber(rec, 0)

    def _block_beyond(self, rec: dict, ext: list, first_hits: dict) -> None:
        self._renumber(rec, self.n)

    def _zero_twice(self, rec: dict, ext: list, first_hits: dict) -> None:
        fresh = rec.get("zero", {}).get("full", [])
        if fresh and self._fire("zero-twice"):
            fresh.append(fresh[0])

    def _fresh_aliased(self, rec: dict, ext: list, first_hits: dict) -> None:
        got = self._fresh_slot(rec)
        if got is None:
            return
        rid, row, i, fresh = got
        shown = rec.get("tables", {}).get("full", {})
        for other in self.running.values():  # a row recorded before this plan (not named anew in it)
            named = [b for b in other.row if b > 0 and b not in row and b not in fresh and b not in self.pins]
            if other.rid != rid and other.rid not in shown and named and self._fire("fresh-aliased"):
                fresh[fresh.index(row[i])] = named[0]
                row[i] = named[0]
                return

    def _row_hole(self, rec: dict, ext: list, first_hits: dict) -> None:
        for rid, row in rec.get("tables", {}).get("full", {}).items():
            if rid not in first_hits and len(row) >= 2 and row[0] > 0 and self._fire("row-hole"):
                row[0] = -1
                return

    def _first_extends(self, rec: dict, ext: list, first_hits: dict):
        """(slot, request, before, n, ck) of this plan's first extends."""
        return [(k, r, b, n, c) for k, (r, b, n, c) in enumerate(ext) if r.rid in first_hits]

    def _hit_other_prefix(self, rec: dict, ext: list, first_hits: dict) -> None:
        for _k, r, before, _n, _c in self._first_extends(rec, ext, first_hits):
            row = rec.get("tables", {}).get("full", {}).get(r.rid)
            if before < self.p or row is None:
                continue
            mine = r.digest(0, self.p)
            other = sorted(b for b, key in self.content.items() if key[0] != mine)
            if other and self._fire("hit-other-prefix"):
                row[0] = other[0]
                return

    def _rewrite_cached(self, rec: dict, ext: list, first_hits: dict) -> None:
        for k, _r, before, _n, _c in self._first_extends(rec, ext, first_hits):
            row = self.running[_r.rid].row
            if (before >= self.p and not self.state and row[(before - self.p) // self.bg] not in self.pins
                    and self._fire("rewrite-cached")):
                rec["batch"]["prefix_lengths"][k] -= self.p
                rec["batch"]["input_lengths"][k] += self.p
                return

    def _hit_unaligned(self, rec: dict, ext: list, first_hits: dict) -> None:
        for k, _r, _before, n, ck in self._first_extends(rec, ext, first_hits):
            if n >= 2 and ck != 1 and self._fire("hit-unaligned"):
                b = rec["batch"]
                b["prefix_lengths"][k] += 1
                b["input_lengths"][k] -= 1
                if ck:
                    b["checkpoint_lengths"][k] -= 1
                return

    def _hit_whole_prompt(self, rec: dict, ext: list, first_hits: dict) -> None:
        p, kk = self.p, self.p // self.bg
        for k, r, before, n, _c in self._first_extends(rec, ext, first_hits):
            size = len(r.prompt)
            if self.state or size % p or before != size - p or before + n != size:
                continue
            d = r.digest(size // p - 1, p)
            cached = [self.index.get((d, j)) for j in range(kk)]
            row = rec.get("tables", {}).get("full", {}).get(r.rid)
            if not all(cached) or row is None or not self._fire("hit-whole-prompt"):
                continue
            fresh = rec["zero"]["full"]
            for j in range(kk):
                slot = before // self.bg + j
                fresh.remove(row[slot])
                row[slot] = cached[j][0]  # type: ignore[index]
            rec["batch"]["prefix_lengths"][k] = size
            rec["batch"]["input_lengths"][k] = 0
            return

    def _hit_same_plan(self, rec: dict, ext: list, first_hits: dict) -> None:
        p, kk = self.p, self.p // self.bg
        rows = rec.get("tables", {}).get("full", {})
        for k, r, before, n, _c in self._first_extends(rec, ext, first_hits):
            q = before // p
            if self.state or before + n <= (q + 1) * p or (q + 1) * p >= len(r.prompt) or r.rid not in rows:
                continue
            for a, a_before, a_n, _ac in ext[:k]:
                if (not (a_before < (q + 1) * p <= a_before + a_n) or a.digest(q, p) != r.digest(q, p)
                        or r.digest(q, p) in self.ever):
                    continue
                if not self._fire("hit-same-plan"):
                    return
                row, fresh = rows[r.rid], rec["zero"]["full"]
                for j in range(kk):
                    slot = q * kk + j
                    fresh.remove(row[slot])
                    row[slot] = a.row[slot]
                rec["batch"]["prefix_lengths"][k] += p
                rec["batch"]["input_lengths"][k] -= p
                return

    def _evict_before_empty(self, rec: dict, ext: list, first_hits: dict) -> None:
        if self.early_eviction and any(b not in self.written for b in self.free):
            self._fire("evict-before-empty")

    # -- the gauge ----------------------------------------------------------------------------------------------------
    def _gauge_active(self, rec: dict, ext: list, first_hits: dict) -> None:
        g = rec["gauge"]
        if self._fire("gauge-active"):
            g[1] += -1 if g[1] else 1

    def _gauge_overflow(self, rec: dict, ext: list, first_hits: dict) -> None:
        g = rec["gauge"]
        if self._fire("gauge-overflow"):
            g[0] = self.n - 1 - g[1] + 1

    # -- state hits ---------------------------------------------------------------------------------------------------
    def _state_input(self, rec: dict, first_hits: dict, pick) -> None:
        for rid, (hit, _blocks, sblock) in first_hits.items():
            row = rec.get("tables", {}).get("state", {}).get(rid)
            if not hit or row is None or not row or row[0] != sblock:
                continue
            want = self.running[rid].digest(hit // self.p - 1, self.p)
            other = sorted(b for b, st in self.shown.items() if b not in row and pick(st, hit, want))
            if other and self._fire(self.fault or ""):
                row[0] = other[0]
                return

    def _state_hit_wrong_state(self, rec: dict, ext: list, first_hits: dict) -> None:
        self._state_input(rec, first_hits, lambda st, hit, want: st[1] and (st[0] != hit or st[2] != want))

    def _decode_state_hit(self, rec: dict, ext: list, first_hits: dict) -> None:
        self._state_input(rec, first_hits, lambda st, hit, want: not st[1])
