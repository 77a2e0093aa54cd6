"""Seeded bugs of the store model for `kvsim selfcheck`: each a small patch modelled on a real bug class.

A record: name, the bug class (research/anchors.md §4 and the store contract's failure modes), the file
(relative to the package root), the exact old text (it must occur exactly once), the new text, and the
fuzz machine expected to kill it. The self-check applies a patch to a copy of the package, never to the tree;
`tests/mutants/test_mutants.py` checks that every patch still applies. Plain data: no kvsim import here.
The other modules' seeded bugs live beside this file (`simulate.py`: sim/simulate/) and are concatenated below.
"""

import runpy
from pathlib import Path

MUTANTS = [
    dict(name="fork-shares-partial-tail", machine="store",
         bug="COW skipped for a partial tail: a Fork maps the source's tail page instead of copying it",
         file="kvmodel/store/activation.py",
         old="if is_tail and refs_after > 1:",
         new="if is_tail and refs_after > 2:"),
    dict(name="fork-takes-no-reference", machine="store",
         bug="no reference taken on Fork (vllm#1556 refcount underflow): the fork maps shared pages unreferenced",
         file="kvmodel/store/activation.py",
         old="            if not plan.move:\n                page.holders.append(space)",
         new="            if False:\n                page.holders.append(space)"),
    dict(name="replicas-freed-before-last-reference", machine="store",
         bug="use-after-free (vllm#37076): a page's Device replica is freed while another holder remains",
         file="kvmodel/store/store.py",
         old="            page.writer = None\n        self.t_pages[page] = None\n        if not holders:",
         new="            page.writer = None\n        self.t_pages[page] = None\n        if len(holders) <= 1 and "
             "page.pins == 0 and not any(h.active for h in holders):"),
    dict(name="writer-kept-at-finish", machine="store",
         bug="writer not cleared at finish: the retained checkpoint's tail stays writable by its old writer",
         file="kvmodel/store/settle.py",
         old="    for page in space.pages:\n        if page.writer is space:\n            page.writer = None\n"
             "        st.t_pages[page] = None\n    st.touch_space(space)",
         new="    for page in space.pages:\n        st.t_pages[page] = None\n    st.touch_space(space)"),
    dict(name="entitlement-returned-early", machine="store",
         bug="entitlement returned to the global pool early (TensorRT-LLM PR #12834 kind: counter on the wrong "
             "level): a materialized page is charged to available, the reservation is kept",
         file="kvmodel/store/mapping.py",
         old="        out.append(st.lease_device(page, None if engine_pages is None else engine_pages[i], "
             "from_reservation=True))",
         new="        space.reservation += 1\n        out.append(st.lease_device(page, None if engine_pages is None "
             "else engine_pages[i], from_reservation=False))"),
    dict(name="truncate-keeps-content-epoch", machine="host",
         bug="content-epoch slip: cutting a private page's columns keeps its epoch, so a stale Host replica "
             "still looks current",
         file="kvmodel/store/store.py",
         old="            page.epoch = self.page_stores[page.pool].new_epoch()\n            page.cut_segments(cols)",
         new="            page.cut_segments(cols)"),
    dict(name="commit-beyond-written-extent", machine="store",
         bug="a unit's commit accepted one position beyond what it wrote (off-by-one in the settle)",
         file="kvmodel/store/units.py",
         old="        limit = sp.committed if r.b is None else r.b\n        if frontier > limit and not (",
         new="        limit = sp.committed if r.b is None else r.b\n        if frontier > limit + 1 and not ("),
    dict(name="map-beyond-entitlement", machine="store",
         bug="ensure_mapped_to_tokens maps one page past the entitlement (over-admission)",
         file="kvmodel/store/mapping.py",
         old="    if needed > space.entitlement:\n        return Refusal(\"entitlement\", f\"{pool}: {needed} pages "
             "needed, entitlement {space.entitlement}\")\n    new = needed - have",
         new="    if needed > space.entitlement + 1:\n        return Refusal(\"entitlement\", "
             "f\"{pool}: {needed} pages "
             "needed, entitlement {space.entitlement}\")\n    new = needed - have"),
    dict(name="map-while-unit-in-flight", machine="store",
         bug="a row's table is republished while its unit is in flight (frozen state not enforced)",
         file="kvmodel/store/mapping.py",
         old="    bundle, space = active_space(st, seq, pool, \"map\")\n    frozen_check(st, space, \"map\")",
         new="    bundle, space = active_space(st, seq, pool, \"map\")"),
    dict(name="drop-host-of-host-only-page", machine="host",
         bug="Host-only page's last replica dropped (vllm#42571 double free across tiers)",
         file="kvmodel/store/transfers.py",
         old="        if not page.device_valid(page.committed):\n            raise violation(\"REP-4\", f\"drop_host",
         new="        if False:\n            raise violation(\"REP-4\", f\"drop_host"),
    dict(name="growth-inside-step", machine="store",
         bug="growth inside a step: kv_lease_growth extends a window while the row's unit is in flight",
         file="kvmodel/store/mapping.py",
         old="    if busy:\n        raise violation(\"ENT-3\"",
         new="    if False:\n        raise violation(\"ENT-3\""),
    dict(name="mtp-lead-beyond-l", machine="store",
         bug="MTP lead beyond L: the draft pool's entitlement leads Main's past the L-page ceiling",
         file="kvmodel/store/activation.py",
         old="        out[\"mtp\"] = min(st.L, main + ceil_div(st.config.backend.draft_window - 1, st.P))",
         new="        out[\"mtp\"] = main + ceil_div(st.config.backend.draft_window - 1, st.P)"),
    dict(name="truncate-drops-last-partial-page", machine="store",
         bug="stale block table after truncate: the last partial page is unmapped although committed columns "
             "remain in it (floor instead of ceil)",
         file="kvmodel/store/settle.py",
         old="    keep = ceil_div(frontier, P)\n    cov = st.cov",
         new="    keep = frontier // P\n    cov = st.cov"),
    dict(name="commit-keeps-old-writer-token", machine="store",
         bug="content-epoch slip: committed columns keep the previous writer's content keys after a rewrite",
         file="kvmodel/store/units.py",
         old="                if not segs or segs[-1][1] != token:",
         new="                if not segs:"),
    dict(name="release-keeps-checkpoint", machine="store",
         bug="double release: a released checkpoint stays listed, so it can be released or forked again",
         file="kvmodel/store/settle.py",
         old="    del st.checkpoints[ckpt]\n    st.ended_ckpts.add(ckpt, \"released\")",
         new="    st.ended_ckpts.add(ckpt, \"released\")"),
    dict(name="fork-frontier-rounded-to-page", machine="store",
         bug="fork frontier rounded to a page: the forked space's committed frontier starts at the page "
             "boundary below the checkpoint's (F = 1000 -> 960)",
         file="kvmodel/store/activation.py",
         old="        space.committed = src.committed",
         new="        space.committed = src.committed - src.committed % st.P"),
    dict(name="host-extents-overlap", machine="host",
         bug="Host arena double allocation (vllm#42571 kind): a split extent keeps its last byte free, so the "
             "next extent overlaps it",
         file="kvmodel/store/host_arena.py",
         old="                    self._free.insert(i, [offset + size, o + s - offset - size])",
         new="                    self._free.insert(i, [offset + size - 1, o + s - offset - size + 1])"),
    dict(name="move-despite-keep-source", machine="store",
         bug="Move where Fork is required: an activation that keeps its source consumes it anyway",
         file="kvmodel/store/activation.py",
         old="    move = ckpt is not None and not keep_source",
         new="    move = ckpt is not None"),
    dict(name="truncate-cuts-shared-page", machine="store",
         bug="a shared page is cut by one holder's truncate (COW skipped on the destructive path)",
         file="kvmodel/store/settle.py",
         old="        if page.refs == 1:  # a shared page is never cut",
         new="        if page.refs >= 1:  # a shared page is never cut"),
    dict(name="reservation-leaked-at-finish", machine="store",
         bug="accounting leak (sglang#35270 kind): finish never returns the unmaterialized entitlement",
         file="kvmodel/store/settle.py",
         old="    st.pools[space.pool].unreserve(space.reservation)  # the terminal release ENT-1 waits for\n",
         new=""),
    # planted to need states the fuzzer rarely built (sim.fuzz.reach): busy, an h2d restore published on the
    # MTP pool, appends into Host-backed pages after a Move
    dict(name="restore-in-flight-not-busy", machine="store",
         bug="refusal path under busy: an activation from a checkpoint whose h2d restore is still in flight is "
             "granted (the unpublished destination is mapped) instead of refused as busy",
         file="kvmodel/store/activation.py",
         old="        if any(p.pins and p.device < 0 for s in ckpt.spaces.values() for p in s.pages):",
         new="        if any(p.pins and p.device < 0 and p.host is None for s in ckpt.spaces.values() "
             "for p in s.pages):"),
    dict(name="mtp-h2d-publish-keeps-a-pin", machine="store",
         bug="wrong pin count at an h2d publish on the MTP pool: the copy's source pin is never dropped, so the "
             "restored page stays pinned (later drops, copies and writes of it are refused)",
         file="kvmodel/store/transfers.py",
         old="            page.device, page.dev_epoch, page.dev_cov = dest, epoch, cov_\n        page.pins -= 2\n",
         new="            page.device, page.dev_epoch, page.dev_cov = dest, epoch, cov_\n"
             "        page.pins -= 1 if x.direction == \"h2d\" and x.pool == \"mtp\" else 2\n"),
    dict(name="append-keeps-host-current", machine="store",
         bug="an append into a page that holds a Host copy (a checkpoint resumed by Move) does not invalidate "
             "it: Host validity checks the content epoch only, not the committed coverage",
         file="kvmodel/store/pages.py",
         old="        return h is not None and h.epoch == self.epoch and h.coverage >= n",
         new="        return h is not None and h.epoch == self.epoch"),
]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("cache.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("simulate.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("judges.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("contract.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("crash.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("policy.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("hashes.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("capacity.py")))["MUTANTS"]
MUTANTS += runpy.run_path(str(Path(__file__).with_name("recovery.py")))["MUTANTS"]
