"""Seeded bugs of the judges and of error recovery for `kvsim selfcheck`, in the record format of
`catalogue.py` (which concatenates them): the KV-event checker (sim/peers/judges/events.py), the block-hash
recomputation (sim/peers/judges/block_hash.py), the engine judge (sim/peers/judges/engine_judge.py) and the recovery
bookkeeping (sim/recovery.py). Each is killed by the machine it names: `judge-events`, `judge-engine`
(sim/fuzz/judges.py, against the reference engine sim/fuzz/refengine.py) or `recovery`
(sim/fuzz/recovery_machine.py). Plain data: no kvsim import here.
"""

MUTANTS = [
    # -- the KV-event checker -------------------------------------------------------------------------
    dict(name="events-repeated-seq-not-flagged", machine="judge-events",
         bug="a repeated KV-event batch sequence number is not flagged (only gaps are): a publisher restart or a "
             "replayed batch goes unnoticed",
         file="sim/peers/judges/events.py",
         old="            elif seq <= self._seq:",
         new="            elif seq < self._seq:"),
    dict(name="events-gap-off-by-one", machine="judge-events",
         bug="off-by-one in the gap check: one lost batch between two sequence numbers is not a gap",
         file="sim/peers/judges/events.py",
         old="            if seq > self._seq + 1:",
         new="            if seq > self._seq + 2:"),
    dict(name="events-clear-forgets-dropped-blocks", machine="judge-events",
         bug="AllBlocksCleared drops the live blocks without remembering them: a later removal of one is "
             "reported as a block never stored (EV-1), not as one the clear dropped (EV-5)",
         file="sim/peers/judges/events.py",
         old="                    self.cleared.update(self.live.pop(k))",
         new="                    self.live.pop(k)"),
    dict(name="events-duplicate-copies-without-preset", machine="judge-events",
         bug="vLLM's duplicate-copy allowance applied to every stream: a live block stored again is counted as "
             "a second copy instead of reported (EV-2)",
         file="sim/peers/judges/events.py",
         old="                if self.duplicate_copies:",
         new="                if True:"),
    dict(name="events-short-store-accepted", machine="judge-events",
         bug="token count checked one way only: a store carrying fewer token ids than its blocks need passes",
         file="sim/peers/judges/events.py",
         old="        if ntok != full_tokens and not sparse and not (self.partial_tails",
         new="        if ntok > full_tokens and not sparse and not (self.partial_tails"),
    # -- block-hash recomputation ---------------------------------------------------------------------
    dict(name="sglang-hash-parent-ignored", machine="judge-events",
         bug="hash recomputation ignores the parent: SGLang's chained sha256 is recomputed from the tokens alone, "
             "so every block below the root reads as a hash mismatch (false EV-7)",
         file="sim/peers/judges/block_hash.py",
         old="        if parent is not None:\n            h.update(parent)\n",
         new=""),
    dict(name="fnv-bulk-hash-parent-ignored", machine="judge-events",
         bug="hash recomputation ignores the parent in the bulk FNV-1a path: the has-parent byte is framed but "
             "the parent's u64 is not (false EV-7 on every child block)",
         file="sim/peers/judges/block_hash.py",
         old="            cols.append(par.astype(\"<u8\").view(np.uint8).reshape(len(idx), 8))\n",
         new=""),
    # -- the engine judge -----------------------------------------------------------------------------
    dict(name="engine-judge-misses-aliased-block", machine="judge-engine",
         bug="the engine judge misses an aliased block: a block handed out fresh while one other live request "
             "names it passes (only a third holder is noticed)",
         file="sim/peers/judges/engine_judge.py",
         old="                if hold.get(blk, 0):",
         new="                if hold.get(blk, 0) > 1:"),
    dict(name="engine-judge-hit-may-cover-prompt", machine="judge-engine",
         bug="off-by-one in the whole-block hit bound: a hit of the entire prompt (nothing left to compute) passes",
         file="sim/peers/judges/engine_judge.py",
         old="        if hit >= known:",
         new="        if hit > known:"),
    dict(name="engine-judge-stats-ignore-hits", machine="judge-engine",
         bug="the prefix-cache stats comparison leaves out the hit tokens: an engine over-reporting its hits passes",
         file="sim/peers/judges/engine_judge.py",
         old="            if (st[\"hits\"], st[\"queries\"], st[\"requests\"]) != (want_hits, want_q, want_n):",
         new="            if (st[\"queries\"], st[\"requests\"]) != (want_q, want_n):"),
    dict(name="engine-judge-leak-unnoticed", machine="judge-engine",
         bug="free-block accounting checked one way only: a block leaked at finish (free + named < pool) passes",
         file="sim/peers/judges/engine_judge.py",
         old="        if free + named != self.usable:",
         new="        if free + named > self.usable:"),
    dict(name="engine-judge-block-range-off-by-one", machine="judge-engine",
         bug="off-by-one in the block-id range: block id num_blocks (one past the pool) passes",
         file="sim/peers/judges/engine_judge.py",
         old="            if not 0 < blk < self.num_blocks:",
         new="            if not 0 < blk <= self.num_blocks:"),
    dict(name="engine-judge-hit-content-unchecked", machine="judge-engine",
         bug="a hit through a block is judged only when the block holds nothing: a block holding another prefix "
             "passes",
         file="sim/peers/judges/engine_judge.py",
         old="            if want is None or have != want:",
         new="            if want is None or have is None:"),
    # -- error recovery -------------------------------------------------------------------------------
    dict(name="recovery-blames-latest-finding", machine="recovery",
         bug="recovery blames a consequence on the latest finding that desynchronized one of its entities instead "
             "of the earliest",
         file="sim/recovery.py",
         old="        for k in lookup:\n            n = marks.get(k)\n"
             "            if n is not None and (best[0] is None or n < best[0]):",
         new="        for k in lookup:\n            n = marks.get(k)\n"
             "            if n is not None and (best[0] is None or n > best[0]):"),
    dict(name="recovery-marks-overwrite", machine="recovery",
         bug="a later finding re-marks an entity another finding already desynchronized: its consequences move "
             "to the later finding",
         file="sim/recovery.py",
         old="            if k not in marks:\n                marks[k] = n",
         new="            marks[k] = n"),
]
