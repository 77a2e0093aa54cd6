"""Seeded bugs of `kvsim simulate`'s scheduler (sim/simulate/) for `kvsim selfcheck`, killed by the `simulate`
fuzz machine (the engine against the README's reference, sim.fuzz.sim_reference).

The record format of `catalogue.py`: name, the bug class, the file (relative to the package root), the exact
old text (it must occur exactly once), the new text, the machine expected to kill it. Each is a bug whose
simulated output looks plausible (no crash, no store rule broken on most workloads) while the per-request
facts the README defines differ. Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="sim-no-decode-tail-page", machine="simulate",
         bug="admission forgets the decode continuation's copy-on-write page of the prompt's partial last page: "
             "a request is admitted one page early, and its decode Fork then finds no room",
         file="sim/simulate/engine.py",
         old="            need = ent - m + 1  # the reservation beyond the reused pages",
         new="            need = ent - m  # the reservation beyond the reused pages"),
    dict(name="sim-match-n-over-p", machine="simulate",
         bug="prefix reuse capped at n // P pages instead of (n - 1) // P: a whole-page prompt reuses its last "
             "page too, leaving its last token uncomputed",
         file="sim/simulate/engine.py",
         old="        m = min(depth, (n - 1) // P)",
         new="        m = min(depth, n // P)"),
    dict(name="sim-evicts-most-recent", machine="simulate",
         bug="LRU eviction of the wrong checkpoint: cached prompts give way most-recently-used first",
         file="sim/simulate/engine.py",
         old="        for cid in list(self.dev):",
         new="        for cid in reversed(list(self.dev)):"),
    dict(name="sim-reuse-not-a-use", machine="simulate",
         bug="a reused checkpoint keeps its place in the LRU order (only retention counts as a use), so a hot "
             "prefix is evicted before cold ones",
         file="sim/simulate/engine.py",
         old="        self.dev[c.cid] = None\n        self.dev.move_to_end(c.cid)\n",
         new="        self.dev[c.cid] = None\n"),
    dict(name="sim-move-longer-checkpoint", machine="simulate",
         bug="Move where Fork is required: a request takes over a retained prompt its own prompt does not "
             "supersede (the prompt's pages beyond the match leave the cache)",
         file="sim/simulate/engine.py",
         old="            move = c.kind == \"prompt\" and depth == len(c.keys)",
         new="            move = c.kind == \"prompt\" and depth >= m"),
    dict(name="sim-evicts-pinned-prefix", machine="simulate",
         bug="eviction releases a checkpoint whose full pages running requests all use: nothing but its tail "
             "is freed and its prefix leaves the index while it is still in memory",
         file="sim/simulate/engine.py",
         old="            if c.keys and _in_use(self._space(cid).pages[len(c.keys) - 1]):",
         new="            if False:"),
    dict(name="sim-index-oldest-equal-holder", machine="simulate",
         bug="the prefix index prefers the oldest of equally short holders: a request forks a stale checkpoint "
             "and refreshes its LRU place instead of the recently used one's",
         file="sim/simulate/prefix.py",
         old="            if n <= len(e[1].keys):",
         new="            if n < len(e[1].keys):"),
    dict(name="sim-wait-counts-shared-prompt", machine="simulate",
         bug="under --admission wait a decoding lane is counted as returning its whole entitlement, the prompt "
             "pages its retained checkpoint keeps included: the head waits where cached prompts should give way",
         file="sim/simulate/engine.py",
         old="        lane.own = -(-(pf.prompt + pf.output) // P) - pf.prompt // P",
         new="        lane.own = -(-(pf.prompt + pf.output) // P)"),
]
