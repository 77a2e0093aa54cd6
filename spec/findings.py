"""How to read a finding of each judge: which commands report it, what its fields say, what each context key is.

Every finding any command reports has the same fields (DESIGN §8): ``rule``, ``trace`` (the input), ``event``,
``line``, ``op``, ``message`` and ``context`` (a dict). What ``event`` counts, where ``line`` points and which
context keys a finding carries depend on the judge that reported it (spec.catalogue.JUDGES); each rule's entry
names its keys (``Rule.context``) and this module says what each means, per judge. ``kvsim explain RULE`` prints
both; tests/test_catalogue_entries.py checks that every key the code puts in a finding is named by its rule's
entry and explained here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.spec.catalogue import JUDGES, InvalidRule, Rule

__all__ = ["Form", "FORMS", "MODEL_GUARD", "forms_of", "meaning", "means"]


@dataclass(frozen=True)
class Form:
    """The findings of one judge: who reports them, what one means, and how to read its fields."""
    judge: str
    reported_by: str  # the commands
    means: str        # what a finding of an engine-judging rule says about the system under test
    event: str        # what the `event` field counts
    line: str         # where `line` points
    op: str           # what the `op` field holds
    keys: dict[str, str] = field(default_factory=dict)  # context key -> what it is
    also: str = ""    # anything else a reader of its findings needs


_STORE_KEYS = {
    "seq": "the sequence (an active address space's owner) the finding is about",
    "ckpt": "the checkpoint the finding is about (a retained address space's owner)",
    "pool": "the pool: main, or a backend pool (mtp, dflash)",
    "page": "a Device page id of the pool (the lease a logical page is mapped to)",
    "block": "a logical block: the index in the sequence's block table (token position >> 6)",
    "row": "a block-table row of the pool",
    "unit": "the unit (a launch) the fact names",
    "xfer": "the transfer (offload, restore or copy) the fact names",
    "tokens": "the token count the fact asks for (ensure_mapped_to_tokens)",
    "write": "[a, b): the token positions the launch writes",
    "frontier": "a committed frontier, in tokens",
    "written": "the extent the unit wrote, in tokens",
    "provisional": "the provisional (speculative) extent a settle trims, in tokens",
    "covered": "the frontier the entitlement covers, in tokens",
    "bounded_at": "the frontier a bounded completion stopped at, as the engine reported it",
    "entitlement": "the sequence's entitlement in the pool, in pages",
    "bound": "the most pages growth may reach: the frontier + the bounded window + the cushion",
    "missing": "pools the configuration enables that the bundle lacks",
    "extra": "pools the bundle holds that the configuration does not enable",
    "offset": "a Host arena byte offset (the start of an extent)",
    "offsets": "the Host arena byte offsets the fact gives, one per page",
    "position": "a committed token position",
    "diff": "the observed counters that differ: {counter: [the engine's, the model's]}",
    "phase": "the publication step the transfer took (reserve, copy, verify, publish, release_source)",
    "after": "the step the transfer had reached before it",
    "protected": "the checkpoint-protected columns of the page (tokens a retained checkpoint still reads)",
    "allocated": "the engine's allocated counter for the pool", "reserved": "the engine's reserved counter",
    "available": "the engine's available counter",
    "layer": "the layer whose paged attention differs from the FP64 oracle",
    "seqs": "the sequences of the batch the layer attended",
}
_PLAN_KEYS = {
    "request": "the request id (as the cachetrace/1 record names it)",
    "group": "the cache group (its id in the cachetrace/1 header: full, swa, state, ...)",
    "block": "a Device block id of that group (block 0 is the null block)",
    "slot": "the index in the request's row of that group (slot i covers tokens [i, i + 1) x block_granularity)",
    "page": "a Host page id (TS-L2-*: the Host side of an op; a snapshot slot for a snapshot op) or, for a prefix "
            "hit (PEER-4), the index of the prompt's prefix page",
    "hit": "the prefix hit in tokens (the computed tokens the request's first extend starts from)",
    "replay": "the tokens the request re-feeds before its hit for a replayable group",
    "source": "the slot or block a hit page was copied from",
    "op_id": "the cache op id (WriteBackOp, LoadBackOp, SnapshotOp, RestoreOp, an L3 op)",
    "plan": "the plan that computed the page",
    "checkpoint": "the token position of the state checkpoint the plan wrote",
    "endpoint": "the token position of the prompt's last aligned boundary",
    "tokens": "the request's tokens with its output, against the single-request bound",
    "call": "the scheduler call that raised (submit, plan, advance, ...)",
    "cause": "the scheduler behaviour the finding follows from (e.g. partial tail published): its first finding is "
             "the root, later ones are its consequences (one cause, one finding)",
    "empty": "the page gauge's empty parents", "active": "the page gauge's active parents (TS-POOL-5) or "
    "TokenSpeed's active_lcm_blocks (PEER-9)", "live": "the blocks the live tables name",
    "available": "TokenSpeed's available_lcm_blocks", "usable": "the usable parents (num_device_pages less the null "
    "page)", "snapshot_free": "snapshot_pool_free_blocks", "snapshot_usable": "num_snapshot_pages less the null page",
}
_STEP_KEYS = {
    "request": "the request id", "slot": "the index in the request's block table", "block": "the block id",
    "hit": "the prefix hit in tokens", "live": "blocks the live requests name", "capacity": "the usable pool",
    "reported": "the engine's prefix-cache stats for the step", "observed": "what the step's admissions give",
    "evictable": "the tree's evictable tokens", "protected": "the tree's protected tokens",
    "total": "the tree's total cached tokens", "cached": "blocks the pool holds under a hash",
    "stream": "live blocks of the event stream", "free": "the pool's free blocks", "named": "blocks (or "
    "(request, block) names) the live tables hold", "usable": "the usable pool",
    "free_walk": "vLLM's free queue walked from its head", "free_count": "its num_free_blocks counter",
    "free_referenced": "blocks in the free queue with ref_cnt > 0", "blocks": "their ids (the first few)",
    "ref_sum": "ref_cnt summed over the pool", "lock_mismatch": "SGLang tree nodes whose lock_ref is off",
    "nodes": "the tree's nodes", "locks_off_tree": "nodes the scheduler holds locks on that left the tree",
    "walked": "the size the tree walked gives", "counter": "the size its counter reports",
    "kind": "evictable or protected", "listed": "nodes in evictable_leaves",
    "ahead": "the block vLLM's free queue held ahead of the evicted one (the one to evict first)",
    "call": "the evict call of the step (1-based)", "need": "the tokens the call was asked to free",
    "group": "the KV cache group of a hybrid model (its index in the engine's KVCacheConfig)",
    "other_group": "the other group whose table names the same block",
    "computed": "the tokens the request had computed before the step", "end": "the tokens computed after it",
    "job": "the Host tier's store or load job id", "chunk": "a CPU chunk of the Host tier",
    "key": "the Host tier's key of a block (its hash and group)", "held": "the chunk that already holds the key",
    "source": "a transfer's source (a GPU block or a CPU chunk)", "destination": "its destination",
    "result": "the Host tier's answer to a lookup (HIT, HIT_PENDING, MISS)",
    "expected": "the answer the judge's copy of the tier gives",
    "exception": "the exception type the engine raised", "frame": "the innermost engine frame: a path "
    "relative to site-packages, its line and function", "traceback": "the last frames of the traceback",
    "node": "a radix-tree node of SGLang's cache (its id, counted from 0 in each run)",
    "check": "which structure or amount check failed (links, ends, dangling, cycle, queue_lost, lost, "
             "queued_referenced, negative, ref_cnt, unmapped, walk, tree_links, tree_value, tree_negative, stale_leaf, "
             "tree_walk, owned_twice, leaked, stray_eviction, over_allocation, amount)",
    "ref_cnt": "the block's ref_cnt in vLLM's pool", "neighbour": "the free-queue neighbour whose link does not point "
    "back at the block", "in_free": "copies of the page in the allocator's free pages",
    "in_tree": "tree nodes whose value holds the page", "in_rows": "running requests whose private row holds it",
    "freed": "the tokens the evict call freed", "holds": "the blocks the request's table holds after the step",
    "needs": "the blocks its computed tokens need",
    "tag": "the state tag the driver wrote into the engine's state tensor (sim.peers.judges.state_tags; 0: the "
           "zeroed state)", "state_after": "the tokens of its writer's sequence the state stands for",
    "writer": "the request whose forward wrote that state", "length": "the tokens the tree node ends at",
    "tree_only": "the pool's slots only the tree holds (no live request names them)",
    "component": "the unified tree's component (full, sliding, mamba)", "tree_holds": "what the tree holds of it",
}
_EVENT_KEYS = {
    "block": "the block hash the event names", "parent": "its parent hash",
    "block_size": "the block size the event declares", "expected": "what was expected (the block size, the hash "
    "recomputed under the scheme)", "blocks": "the event's blocks", "tokens": "its token ids",
    "live": "the live blocks of the medium", "capacity": "the capacity (--capacity)", "medium": "the medium",
    "seq": "the batch's sequence number", "previous": "the sequence number before it",
    "first": "the first missing sequence number", "last": "the last missing one",
}
_ENGINE = "the engine under test broke the rule"
FORMS = {
    "replay": Form("replay", "kvsim replay, kvsim check, kvsim simulate (its recorded trace), kvsim fuzz",
                   f"{_ENGINE} in the kvtrace/1 trace it recorded",
                   "the index of the trace event (0 is the first event after the header; -1 the header's "
                   "configuration)", "the line of the trace file holding that event (1 is the header)",
                   "the event's op (activate, map, launch, ...; header for the configuration)", _STORE_KEYS),
    "model": Form("model", "kvsim fuzz (the cache machine) and kvsim selfcheck",
                  "kvsim's cache model (kvmodel.cache) broke a rule of the cache concepts: kvsim's own bug, or a "
                  "seeded one", "the fuzz machine's step (its shrunk example lists the operations)",
                  "no line: the finding names the rule and a one-line message", "the machine's operation", {}),
    "tokenspeed": Form("tokenspeed", "kvsim peer tokenspeed; kvsim replay of a cachetrace/1 file (kvsim peer "
                       "--record F)", f"{_ENGINE} (the TokenSpeed scheduler, in the plans of this run)",
                       "the plan number (the last plan before the record; -1 before the first)",
                       "the line of the cachetrace/1 record whose application found it (a "
                       "submit, plan, result or error record; `kvsim peer` names the run's record, kept with "
                       "--record F)", "plan", _PLAN_KEYS,
                       "a root finding carries its number `id`; a later one that follows from the same cause or "
                       "entities is listed apart as its consequence, with `of` (the root's id), and is no violation"),
    "probe": Form("probe", "kvsim peer tokenspeed --probe-config", "the TokenSpeed wheel's configuration gate "
                  "disagrees with the cache concepts on one probe", "the probe's place",
                  "the probe's place in the list, shown as (config probe):N", "the probe's name (its JSON carries "
                  "probe, expected and got instead of a context)", {}),
    "engine": Form("engine", "kvsim peer vllm, kvsim peer sglang; kvsim replay (or events) of a kvsim-peer/1 log "
                   "(kvsim peer --record F)", f"{_ENGINE} (vLLM's scheduler or SGLang's radix cache, in the steps "
                   "of this run)", "the engine step (its message names it too)",
                   "the line of the run's kvsim-peer/1 log holding the step (kvsim peer --record F keeps it; kvsim "
                   "replay F re-judges it without the engine)",
                   "step", _STEP_KEYS,
                   "a root finding carries its number `id` and, where the driver's ledger knows it, `engine_frame`: "
                   "the engine frame that last changed its block, node or request (also said in its message); a "
                   "later one on a marked entity or with the same mechanism is listed apart as its consequence, with "
                   "`of` (one cause, one finding), and is no violation"),
    "events": Form("events", "kvsim events; every kvsim peer run (the engine's KV events)",
                   f"{_ENGINE}: the KV-event stream it published would mislead a consumer (a KV-aware router)",
                   "the line (the same as `line`)", "the line of the event log holding the batch (of a kvsim peer "
                   "vllm|sglang run: the line of its kvsim-peer/1 log holding the step that published it)",
                   "kv", _EVENT_KEYS),
}
if set(FORMS) != set(JUDGES):
    raise InvalidRule(f"spec.findings: a finding form per judge of {JUDGES}, got {sorted(FORMS)}")


MODEL_GUARD = ("kvsim's own model broke the rule: only hand-edited or buggy model state fires it (a bug in kvsim, "
               "or a seeded one), never an engine's trace")


def means(rule: Rule, form: Form) -> str:
    """What a finding of `rule` reported by `form`'s judge says about the system under test."""
    return MODEL_GUARD if rule.evidence == "model" and form.judge == "replay" else form.means


def forms_of(rule: Rule) -> list[Form]:
    """The finding forms of a rule: its own judge's, then each reading's (each once; none for a clause)."""
    return [FORMS[j] for j in dict.fromkeys(j for j, _ in rule.checkers())]


def meaning(rule: Rule, key: str) -> str:
    """What context key `key` of a finding of `rule` is (from the first of its judges that explains it)."""
    return next((f.keys[key] for f in forms_of(rule) if key in f.keys), "")
