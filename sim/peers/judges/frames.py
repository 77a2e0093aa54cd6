"""Where in the engine a block, radix node or request last changed: the judge's copy of its driver's ledger.

Each engine driver (``sim/peers/ENGINE/ledger.py``, run in the engine's process) wraps the engine's own pool,
free-queue, allocator and tree methods and sends, per step, the frame that last handled every block (SGLang:
page), node and request the step touched -- as an id, its text sent once (``freed by
vllm/v1/core/block_pool.py:816 in free_blocks, called from vllm/v1/core/single_type_kv_cache_manager.py:599 in
free``). ``Frames`` keeps the latest per entity so that any finding about a block, node or request can say where
the engine last changed it (``describe``), and gives the function part of that frame (``site``) to the
recovery's mechanism key: the same rule firing again on a block the same engine function last changed is the
same cause. Knows the ledger's message shape, nothing of any engine's API.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Frames", "site"]

# context keys naming an entity, in the order a finding's subject is chosen, with the ledger map they read
_SUBJECTS = (("block", "block"), ("node", "node"), ("request", "request"), ("ahead", "block"))


def site(text: str | None) -> str:
    """The function part of a frame's text (``freed by X:N in f``): the cause's place, without its caller."""
    return "" if not text else text.split(", called from ", 1)[0]


class Frames:
    """Per block (or page), node and request: the id of the engine frame that last changed it, and each id's
    text. ``queue`` keeps vLLM's last free-queue operation per block apart (the structure findings name it)."""

    __slots__ = ("text", "block", "queue", "node", "request", "hash", "unit")

    def __init__(self, unit: str = "block") -> None:
        self.text: dict[int, str] = {}
        self.block: dict[int, int] = {}
        self.queue: dict[int, int] = {}
        self.node: dict[int, int] = {}
        self.request: dict[str, int] = {}
        self.hash: dict[int, int] = {}   # event hash -> the frame that built its BlockStored event
        self.unit = unit                 # what the engine calls a block in its own words ("page" for SGLang)

    def update(self, facts: dict | None) -> None:
        """Adopt one step's ledger facts (vLLM: ``blocks`` rows ``[block, ref, queued, links, hashed, frame,
        queue frame]``; SGLang: ``pages`` and ``nodes`` as ``[id, frame]``; both: ``requests``, ``frames``)."""
        if not facts:
            return
        for fid, text in facts.get("frames", ()):
            self.text[fid] = text
        for row in facts.get("blocks", ()):
            if row[5] >= 0:
                self.block[row[0]] = row[5]
            if row[6] >= 0:
                self.queue[row[0]] = row[6]
        for page, fid in facts.get("pages", ()):
            self.block[page] = fid
        for node, fid in facts.get("nodes", ()):
            self.node[node] = fid
        for rid, fid in facts.get("requests", ()):
            self.request[rid] = fid
        for h, fid in facts.get("hashes", ()):
            self.hash[h] = fid

    def of(self, kind: str, ident: Any) -> str | None:
        """The text of the frame that last changed ``ident`` (``kind``: block, queue, node, request)."""
        table = getattr(self, kind, None)
        fid = table.get(ident) if table is not None else None
        return None if fid is None else self.text.get(fid)

    def subject(self, ctx: dict) -> tuple[str, Any, str] | None:
        """The entity a finding is about and its frame: (kind, id, text) for the first of block, node, request
        (then the block a policy finding says should have gone first) whose frame is known."""
        for key, kind in _SUBJECTS:
            ident = ctx.get(key)
            if ident is None and key + "s" in ctx and ctx[key + "s"]:
                ident = ctx[key + "s"][0]
            if ident is None or isinstance(ident, (list, dict)):
                continue
            text = self.of(kind, ident)
            if text is not None:
                return self.unit if key in ("block", "ahead") else key, ident, text
        return None

    def describe(self, ctx: dict, aspect: str | None = None) -> tuple[str, str] | None:
        """(sentence, frame text) naming where the engine last changed the finding's subject: ``block 47 was
        last freed by vllm/v1/core/block_pool.py:816 in free_blocks, called from ...``. ``aspect`` ``queue``
        names vLLM's last free-queue operation on the block instead of its last pool call (or, where the neighbour
        whose link went stale is named, that neighbour's); ``request`` the engine's last call for the request. A
        context that names the frame itself (``frame_id``: the change the finding is about, e.g. an eviction) is
        said as it is."""
        fid = ctx.pop("frame_id", None)
        if fid is not None and fid in self.text:
            key = next((k for k in ("block", "node", "request") if ctx.get(k) is not None), None)
            text = self.text[fid]
            return (f"{self.unit if key == 'block' else key} {ctx[key]} was {text}" if key else text), text
        if aspect == "request" and ctx.get("request") is not None:  # what the engine's manager last did for it
            asked = self.of("request", ctx["request"])
            if asked is not None:
                return f"request {ctx['request']} was last {asked}", asked
        if aspect == "queue" and ctx.get("block") is not None:
            near = ctx.get("neighbour")
            stale = self.of("queue", near) if near is not None else None
            if stale is not None:  # the neighbour whose link went stale: its last queue operation
                return f"{self.unit} {near} was last {stale}", stale
            queued = self.of("queue", ctx["block"])
            if queued is not None:
                return f"{self.unit} {ctx['block']} was last {queued}", queued
        got = self.subject(ctx)
        if got is None:
            return None
        key, ident, text = got
        return f"{key} {ident} was last {text}", text

    def published(self, ctx: dict) -> tuple[str, str] | None:
        """For a KV-event finding: where the engine built the event that stored the hash it names (its
        ``block``, else its ``parent``), where the driver's ledger knows it."""
        for key in ("block", "parent"):
            h = ctx.get(key)
            fid = self.hash.get(h) if isinstance(h, int) else None
            if fid is not None and fid in self.text:
                return f"hash {h} was {self.text[fid]}", self.text[fid]
        return None
