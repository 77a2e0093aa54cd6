"""Seeded bugs of TokenSpeed's cachetrace/1 contract judge (sim/peers/cachetrace/) for `kvsim selfcheck`, in the
record format of `catalogue.py` (which concatenates them). Each is killed by the `judge-contract` machine
(sim/fuzz/contract_machine.py: the judge over plans of the reference scheduler sim/fuzz/ts_reference.py, with one
scheduler bug planted). Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="contract-checkpoint-at-chunk-end", machine="judge-contract",
         bug="off-by-one at a state checkpoint's chunk end: an internal checkpoint materialized at the extend's own "
             "aligned end passes TS-ST-3 (the last reusable checkpoint must lie strictly inside the extent)",
         file="sim/peers/cachetrace/state_group.py",
         old="                if at != want or not before < at < after:",
         new="                if at != want or not before < at <= after:"),
    dict(name="contract-endpoint-never-judged", machine="judge-contract",
         bug="off-by-one in the endpoint's premise: the extend that completes the prompt (it ends exactly at the "
             "prompt) is never judged for TS-ST-4, so a prefill skipping its last aligned checkpoint passes",
         file="sim/peers/cachetrace/state_group.py",
         old="            if ext and before < r.prefill <= after and rid not in self.endpoints:",
         new="            if ext and before < r.prefill < after and rid not in self.endpoints:"),
    dict(name="contract-decode-state-published", machine="judge-contract",
         bug="TS-ST-2 reads the state's boundary instead of who wrote it: a hit reusing a state a decode wrote is "
             "judged as a prefill checkpoint",
         file="sim/peers/cachetrace/state_group.py",
         old="        if st is not None and not st.prefill:",
         new="        if st is not None and not st.prefill and st.key is not None:"),
    dict(name="contract-bound-exclusive", machine="judge-contract",
         bug="off-by-one in the single-request bound (TS-ADM-3): a request of exactly the bound refused at "
             "submission passes",
         file="sim/peers/cachetrace/capacity.py",
         old="        if rec.refused is not None and n <= self.bound:",
         new="        if rec.refused is not None and n < self.bound:"),
    dict(name="contract-gauge-active-one-way", machine="judge-contract",
         bug="the page gauge's active parents compared one way only (TS-POOL-5): a gauge under-counting the live "
             "tables' blocks passes",
         file="sim/peers/cachetrace/capacity.py",
         old="        if active == len(live):\n            return",
         new="        if active <= len(live):\n            return"),
    dict(name="contract-eviction-single-page-unjudged", machine="judge-contract",
         bug="TS-ADM-4 judges only plans that evict several pages: one cached page evicted while an empty page is "
             "free passes",
         file="sim/peers/cachetrace/eviction.py",
         old="    certain = [b for b in evicted if keys[content[b]] == 1]",
         new="    certain = [b for b in evicted if keys[content[b]] == 1 and len(evicted) > 1]"),
    dict(name="contract-hit-may-cover-prompt", machine="judge-contract",
         bug="off-by-one in the hit bound (TS-PFX-1): a block-aligned prompt hit to its last token passes",
         file="sim/peers/cachetrace/hits.py",
         old="        if hit >= r.prefill:",
         new="        if hit > r.prefill:"),
    dict(name="contract-hit-content-prefix-unchecked", machine="judge-contract",
         bug="a reused slot is judged by its page offset only (TS-TBL-1): a hit naming a cached block of another "
             "prefix passes",
         file="sim/peers/cachetrace/contract.py",
         old="            if want is None or have is None or have[0] != want or have[1] != (i % (p // bg) if bg < p "
             "else 0):",
         new="            if want is None or have is None or have[1] != (i % (p // bg) if bg < p else 0):"),
    dict(name="contract-zero-duplicates-off-by-one", machine="judge-contract",
         bug="PEER-2's duplicate check counts one repeat as none: a page listed twice to zero in one plan passes",
         file="sim/peers/cachetrace/contract.py",
         old="        if len(set(pages)) != len(pages):",
         new="        if len(set(pages)) < len(pages) - 1:"),
    dict(name="contract-ack-twice-unnoticed", machine="judge-contract",
         bug="PEER-3 forgets acknowledged ops: a cache op acknowledged twice passes",
         file="sim/peers/cachetrace/contract.py",
         old="            elif oid in self.acked:\n                self.find(\"PEER-3\", line, "
             "f\"cache op {oid} acknowledged twice\", op_id=oid)",
         new="            elif False:\n                self.find(\"PEER-3\", line, "
             "f\"cache op {oid} acknowledged twice\", op_id=oid)"),
    dict(name="contract-l3-missing-keeps-found", machine="judge-contract",
         bug="TS-L2-13 keeps a key found once even after a later query answered it missing: a get of a known lost "
             "object passes",
         file="sim/peers/cachetrace/l3_reads.py",
         old="                if ok:\n                    self.found.add(k)\n                else:\n"
             "                    self.found.discard(k)",
         new="                if ok:\n                    self.found.add(k)"),
    dict(name="contract-l3-failed-get-forgotten", machine="judge-contract",
         bug="TS-L2-14 forgets a failed get: a key whose get failed fetched again (no put since) passes",
         file="sim/peers/cachetrace/l3_reads.py",
         old="                    self.unread[k] = sd.op\n",
         new=""),
]
