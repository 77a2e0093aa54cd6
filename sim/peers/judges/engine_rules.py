"""The engine step judge's rules as data: each rule PEER-5 ... PEER-9 and PEER-11 with its title and seed clause
(``RULES``), and how it reads the seed for engines whose unit is a block of block_size tokens (``DECISIONS``).

Kept apart from the judge (``engine_judge.EngineJudge``, which adds the engine's own eviction-policy rule from
``sim.peers.ENGINE.policy``) so the rules read as a table: the report and ``kvsim rules`` print them from here.
"""

from __future__ import annotations

__all__ = ["RULES", "DECISIONS"]

_SEED = "seed 002 (cache concepts)"
RULES: dict[str, tuple[str, str]] = {
    "PEER-5": ("every block id lies in the pool and live requests never name more blocks than it holds",
               f'{_SEED} l.264: "a replicated group translates to itself minus the null block"; l.272: the '
               'allocator "counts all nonnull refs in the request table"'),
    "PEER-6": ("prefix hits are whole blocks and leave the prompt's last token to compute",
               f'{_SEED} l.13: "two requests share cache only at multiples of this many tokens"'),
    "PEER-7": ("a hit names blocks holding exactly that prefix, computed by an earlier or the same forward, "
               "and live in the engine's event stream",
               f'{_SEED} l.183: "the FIFO data plane orders any hitter\'s forward after the writer"; l.193: "one '
               'externally visible prefix event"'),
    "PEER-8": ("a fresh block is named by no other live request; no request computes into a block another "
               "live request named",
               f'{_SEED} l.167: "publishing a table\'s completed blocks may replace one with the key\'s existing '
               'canonical block"'),
    "PEER-9": ("the scheduler's prefix-cache stats and block counts agree with its decisions and its event "
               "stream", f'{_SEED} l.193: the scheduler "keeps no residency counters of its own" beyond what the '
               'event carries; l.38: leak checks ask the index'),
    "PEER-11": ("the engine under test completes every call without raising",
                f'{_SEED} l.112: "The scheduler asserts both when batching a plan\'s ops"; l.319: "the pools and the '
                'coordinator assert on the same fields"'),
}
# How each rule reads the seed for engines whose unit is a block of block_size tokens (vLLM, SGLang).
DECISIONS: dict[str, str] = {
    "PEER-5": "The block size plays prefix_granularity's part. vLLM's block 0 (its null block) and SGLang's page 0 "
              "(its padding slot) are the reserved null block: a pool of N blocks has N - 1 usable, the capacity "
              "EV-6 applies to the stream.",
    "PEER-6": "A hit is the computed-token count a request is first scheduled with (vLLM's num_computed_tokens "
              "of a new request, SGLang's matched prefix length). The prompt's last token is always computed "
              "(its logits are needed), so a hit stops short of it.",
    "PEER-7": "Publication at the scheduled window end: vLLM caches a block's hash when it allocates the block "
              "for the tokens being computed, so a request admitted in the same step may hit it; every layer "
              "writes the batch's KV before attending, so the hitter's forward reads it after the writer. SGLang "
              "inserts after the forward, so its hits name blocks of earlier steps only. The stream check reads "
              "the batches published up to the end of the step (vLLM publishes a step's events after it).",
    "PEER-8": "A computed block may be swapped for the cache's canonical copy of the same content (SGLang's "
              "checkpoint adopts the tree's pages and frees its duplicates): the new block must hold that "
              "content. Requests preempted in a step give their blocks back before the step allocates.",
    "PEER-9": "vLLM: PrefixCacheStats (requests, queried tokens, hit tokens of newly admitted requests) per step; "
              "free blocks (its free queue, evictable cached blocks included) plus the blocks live requests name "
              "equal the usable pool; hashes in its cached-block map equal the stream's live blocks. SGLang: free "
              "plus evictable pages plus the pages live rows name equal the pool; the tree's evictable plus "
              "protected tokens equal its total; its total in pages equals the stream's live blocks. Deeper "
              "counters, read by the driver from the engine's own structures every probe_every steps: vLLM's free "
              "queue walked from its head has num_free_blocks blocks, none with ref_cnt > 0, and ref_cnt summed over "
              "the pool equals the (request, block) names of the live tables; SGLang's lock_ref of every tree node "
              "equals the locks the driver holds at or below it, and the tree walked gives the evictable and "
              "protected sizes its counters report (sim/peers/ENGINE/counters.py). TokenSpeed (its bindings, read "
              "after every answer: sim/peers/tokenspeed/counters.py): active + available LCM parents never exceed "
              "the usable pool and fall short only by parents kvsim knows a holder outside the tables pins -- a Host "
              "tier's ops in flight, one parent per internal state checkpoint of the plan or the plan before -- and "
              "by none once the run has drained; empty <= available; no snapshot block held with no request "
              "retracted. Decided (issue 31): the equality active + available = usable, judged before, is not the "
              "seed's -- L42 splits the pool into empty, active (the live requests' block tables) and cache-only "
              "residency, and L38 lets holders other than a table (a prefix-cache entry, an in-flight transfer) pin "
              "a cache-only parent, which the wheel's available count (empty or fully evictable parents) leaves "
              "out. On state_workload.jsonl with 512-token chunks it failed 9 readings, one parent short after "
              "each plan that writes an internal checkpoint and the plan after: the wheel keeps the checkpoint out "
              "of the request's table while the row it emits names it, and pinned until its publication. That "
              "half is the wheel's (its gauge counts the checkpoint as cache-only: TS-POOL-5, L42/L74), the rest "
              "the rule's; a leak still fires, at the latest once the run has drained.",
    "PEER-11": "An exception raised while the engine steps (its own assert included) is a finding of the engine "
               "under test when the traceback has a frame inside the engine's package: the finding names the "
               "exception, its message, the innermost engine frame (path relative to site-packages), the step and "
               "the request being processed; the run stops there and every earlier finding is kept. An exception "
               "with no engine frame is kvsim's own driver failing (exit 3); one before the first step is a setup "
               "the engine refused (exit 2).",
}
