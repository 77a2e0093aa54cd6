"""A reference radix cache in SGLang's shape: the engine the `judge-policy` machine drives for PEER-13 and SGLang's
PEER-9 deep counters.

Written from SGLang's own statement of the policy (sglang/srt/mem_cache/radix_cache.py, read as documentation,
never imported): a tree of page-aligned token keys, each node holding its pages; ``match_prefix`` walks the longest
cached prefix and refreshes ``last_access_time`` on its path; a running request locks its matched node
(``inc_lock_ref`` walks to the root: a node's ``lock_ref`` counts the locks at or below it, and a node whose count
leaves or reaches 0 moves its tokens between ``evictable_size_`` and ``protected_size_``); ``insert`` adds what a
finished request computed (splitting a node where the new key diverges inside it) and the pages it duplicated go
back to the pool; ``evict(num_tokens)`` pops the least recently accessed unlocked leaf from a heap over
``evictable_leaves`` (unlocked nodes with no live child), frees its pages, deletes it, and pushes its parent once it
is a childless unlocked node, until enough tokens are free. Requests here are prompts only: admitted when their
pages fit (evicting if the pool is short), held ``life`` steps, then inserted and unlocked.

Each step's message carries, per evict call, the tree just before it (parent, lock_ref, the rank of
last_access_time, first page, pages per node) and the nodes it removed, and the deep counters a driver reads
(``probe``: the tree walked from the root against ``evictable_size_`` / ``protected_size_`` / ``evictable_leaves``
and the locks the scheduler holds). ``RADIX_FAULTS`` are bugs of that tree; each fires once at its first occasion
from step ``fault_step`` and records (rule, step) in ``fired``. Imports nothing of kvsim.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

RADIX_FAULTS = {
    "evict-mru": "PEER-13",             # the most recently accessed unlocked leaf evicted first
    "evict-locked": "PEER-13",          # a locked leaf evicted
    "lock-ref-drift": "PEER-9",         # dec_lock_ref stops one node short of the root
    "evictable-size-drift": "PEER-9",   # a deleted leaf's tokens stay in evictable_size_
    "leaf-status-stale": "PEER-9",      # a node left childless and unlocked never joins evictable_leaves
}
SAME_STEP = {"evict-locked": {"PEER-9"},  # the scheduler's lock then names a node no longer in the tree
             "leaf-status-stale": {"PEER-13"}}  # an evict call that step misses the unlisted leaf, taking newer ones

_ids = itertools.count(1)


@dataclass(eq=False)
class Node:
    key: tuple = ()              # tokens, a whole number of pages
    pages: list = field(default_factory=list)
    parent: Node | None = None
    children: dict = field(default_factory=dict)  # first page's tokens -> child
    lock_ref: int = 0
    access: int = 0
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Request:
    rid: str
    tokens: tuple
    life: int
    node: Node | None = None     # the locked node (its matched prefix)
    matched: int = 0             # tokens matched
    own: list = field(default_factory=list)


def lru_prefix(tree: dict[int, tuple[int, int, int]], gone: set[int]) -> bool:
    """Whether peeling unlocked leaves least recently accessed first (equal times in any order) can remove exactly
    ``gone`` before anything else; ``tree``: node -> (parent, 0 for the root; lock_ref; access time)."""
    kids: dict[int, int] = {}
    for parent, _lock, _t in tree.values():
        kids[parent] = kids.get(parent, 0) + 1
    left, out = set(gone), set()
    while left:
        leaves = [i for i, (_p, lock, _t) in tree.items() if i not in out and not lock and not kids.get(i, 0)]
        if not leaves:
            return False
        oldest = min(tree[i][2] for i in leaves)
        take = [i for i in leaves if tree[i][2] == oldest and i in left]
        if not take:
            return False
        for i in take:
            left.discard(i)
            out.add(i)
            kids[tree[i][0]] -= 1
    return True


class RadixRef:
    def __init__(self, page_size: int, num_pages: int, fault: str | None = None, fault_step: int = 0) -> None:
        self.ps, self.num_pages = page_size, num_pages
        self.fault, self.fault_step = fault, fault_step
        self.fired: list[tuple[str, int]] = []
        self.free: list[int] = list(range(1, num_pages))
        self.root = Node()
        self.root.lock_ref = 1
        self.evictable = self.protected = 0
        self.leaves: set[Node] = set()
        self.clock = 0
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.step_no = 0
        self.evictions: list[dict] = []
        self.stale: list[Node] = []  # leaf-status-stale: nodes left childless and unlocked, not listed

    def _fire(self, name: str) -> bool:
        if self.fault == name and not self.fired and self.step_no >= self.fault_step:
            self.fired.append((RADIX_FAULTS[name], self.step_no))
            return True
        return False

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def submit(self, rid: str, tokens: list[int], life: int) -> None:
        n = len(tokens) - len(tokens) % self.ps
        if n:
            self.waiting.append(Request(rid, tuple(tokens[:n]), max(1, life)))

    # -- the tree ------------------------------------------------------------------------------------------------------
    def _leaf_status(self, node: Node) -> None:
        if node is self.root:
            return
        if node.lock_ref == 0 and not node.children:
            self.leaves.add(node)
        else:
            self.leaves.discard(node)

    def match(self, tokens: tuple) -> tuple[Node, int]:
        self.clock += 1
        node, at = self.root, 0
        while at < len(tokens):
            child = node.children.get(tokens[at:at + self.ps])
            if child is None:
                break
            k = 0
            while k < len(child.key) and at + k < len(tokens) and child.key[k:k + self.ps] == tokens[at + k:at + k
                                                                                                    + self.ps]:
                k += self.ps
            if k < len(child.key):
                child = self._split(child, k)
            child.access = self.clock
            node, at = child, at + k
        return node, at

    def _split(self, child: Node, k: int) -> Node:
        """The first k tokens of ``child`` become a new node above it (same lock count, same access)."""
        parent = child.parent
        if parent is None:
            raise ValueError("the root is never split")
        top = Node(child.key[:k], child.pages[:k // self.ps], parent, {}, child.lock_ref, child.access)
        parent.children[child.key[:self.ps]] = top
        child.key, child.pages, child.parent = child.key[k:], child.pages[k // self.ps:], top
        top.children[child.key[:self.ps]] = child
        self._leaf_status(top)
        return top

    def lock(self, node: Node) -> None:
        while node is not self.root and node is not None:
            if node.lock_ref == 0:
                self.evictable -= len(node.key)
                self.protected += len(node.key)
            node.lock_ref += 1
            self._leaf_status(node)
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: Node) -> None:
        stop = self.root
        top = node
        while top.parent is not self.root and top.parent is not None:
            top = top.parent
        if top is not node and self._fire("lock-ref-drift"):  # the bug: the walk stops below the root's child
            stop = top
        while node is not stop and node is not None:
            if node.lock_ref == 1:
                self.evictable += len(node.key)
                self.protected -= len(node.key)
            node.lock_ref -= 1
            self._leaf_status(node)
            node = node.parent  # type: ignore[assignment]

    def insert(self, tokens: tuple, pages: list[int], matched: int) -> None:
        """Add ``tokens`` (their pages); the pages a finished request computed for a prefix the tree now holds (beyond
        what it matched at admission) go back to the pool."""
        node, at = self.match(tokens)
        self.free += pages[matched // self.ps:at // self.ps]
        if at < len(tokens):
            new = Node(tokens[at:], pages[at // self.ps:], node, {}, 0, self.clock)
            node.children[new.key[:self.ps]] = new
            self.evictable += len(new.key)
            self._leaf_status(new)
            self._leaf_status(node)

    def _delete(self, node: Node) -> None:
        parent = node.parent
        if parent is None:
            raise ValueError("the root is never deleted")
        del parent.children[node.key[:self.ps]]
        self.free += node.pages
        if not self._fire("evictable-size-drift"):
            self.evictable -= len(node.key) if node.lock_ref == 0 else 0
        if node.lock_ref:
            self.protected -= len(node.key)
        self.leaves.discard(node)
        node.parent = None
        if parent is self.root:
            return
        if (self.fault == "leaf-status-stale" and not self.fired and self.step_no >= self.fault_step
                and not parent.children and parent.lock_ref == 0):
            self.stale.append(parent)  # the bug: it never joins evictable_leaves (shown by the step's probe)
        else:
            self._leaf_status(parent)

    def evict(self, need: int) -> None:
        nodes, index = self._snapshot()
        tree = {n.id: (n.parent.id if n.parent is not self.root and n.parent is not None else 0, n.lock_ref, n.access)
                for n in self._walk()}  # the tree the call starts from: node -> (parent, lock_ref, access)
        heap = [(n.access, n.id, n) for n in self.leaves]
        heapq.heapify(heap)
        freed, removed = 0, []
        locked = [n for n in self._walk() if n.lock_ref and not n.children]
        if locked and self._fire("evict-locked"):
            removed.append(locked[0])
            freed += len(locked[0].key)
            self._delete(locked[0])
        mru = self.fault == "evict-mru" and not self.fired and self.step_no >= self.fault_step and len(heap) > 1
        while freed < need and heap:
            if mru:  # the bug: the heap keyed by the negated access time
                entry = max(heap, key=lambda e: (e[0], e[1]))
                heap.remove(entry)
                heapq.heapify(heap)
            else:
                entry = heapq.heappop(heap)
            node = entry[2]
            if node.parent is None or node.children or node.lock_ref:
                continue
            parent = node.parent
            removed.append(node)
            freed += len(node.key)
            self._delete(node)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.access, parent.id, parent))
        if mru and removed and not lru_prefix(tree, {n.id for n in removed}):
            self._fire("evict-mru")  # it shows: no least-recently-used peeling removes exactly these first
        self.evictions.append({"need": need, "nodes": nodes, "evicted": sorted(index[n.id] for n in removed)})

    def _walk(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def _snapshot(self) -> tuple[list, dict]:
        nodes: list = []
        index: dict[int, int] = {}
        times: list[int] = []
        stack = [(c, -1) for c in self.root.children.values()]
        while stack:
            n, parent = stack.pop()
            index[n.id] = len(nodes)
            nodes.append([parent, n.lock_ref, 0, n.pages[0] if n.pages else -1, len(n.pages)])
            times.append(n.access)
            stack.extend((c, index[n.id]) for c in n.children.values())
        ranks = {t: r for r, t in enumerate(sorted(set(times)))}
        for row, t in zip(nodes, times):
            row[2] = ranks[t]
        return nodes, index

    # -- steps ---------------------------------------------------------------------------------------------------------
    def step(self) -> dict:
        self.evictions = []
        for r in list(self.running):
            r.life -= 1
            if r.life <= 0:
                self.running.remove(r)
                self.insert(r.tokens, self._pages_of(r) + r.own, r.matched)
                self.unlock(r.node)  # type: ignore[arg-type]
        while self.waiting:
            r = self.waiting[0]
            node, at = self.match(r.tokens)
            need = (len(r.tokens) - at) // self.ps
            self.lock(node)  # its matched prefix is locked before the allocation may evict
            if need > len(self.free):
                short = (need - len(self.free)) * self.ps
                if short > sum(len(n.key) for n in self._walk() if n.lock_ref == 0):
                    self.unlock(node)
                    break
                self.evict(short)
                if need > len(self.free):
                    self.unlock(node)
                    break
            self.waiting.pop(0)
            r.node, r.matched = node, at
            r.own = [self.free.pop(0) for _ in range(need)]
            self.running.append(r)
        if any(n.parent is not None and not n.children and n.lock_ref == 0 and n not in self.leaves
               for n in self.stale):
            self._fire("leaf-status-stale")
        self.stale = [n for n in self.stale if n.parent is not None and n not in self.leaves]
        msg = {"step": self.step_no, "new": [], "cached": [], "scheduled": {}, "tokens": {}, "finished": [],
               "preempted": [], "stats": None, "batches": [], "evictions": self.evictions, "probe": self.probe()}
        self.step_no += 1
        return msg

    def _pages_of(self, r: Request) -> list[int]:
        """The pages of r's matched prefix, root to its locked node."""
        chain, n = [], r.node
        while n is not None and n is not self.root:
            chain.append(n.pages)
            n = n.parent
        return [p for pages in reversed(chain) for p in pages]

    def probe(self) -> dict:
        want: dict[int, int] = {}
        for r in self.running:
            n = r.node
            while n is not None and n is not self.root:
                want[n.id] = want.get(n.id, 0) + 1
                n = n.parent
        evictable = protected = count = wrong = 0
        bad: list[list[int]] = []
        leaves: set[int] = set()
        for n in self._walk():
            count += 1
            if n.lock_ref == 0:
                evictable += len(n.key)
                if not n.children:
                    leaves.add(n.id)
            else:
                protected += len(n.key)
            expect = want.pop(n.id, 0)
            if n.lock_ref != expect:
                wrong += 1
                if len(bad) < 8:
                    bad.append([n.id, n.lock_ref, expect])
        listed = {n.id for n in self.leaves}
        return {"nodes": count, "evictable_walk": evictable, "protected_walk": protected, "evictable": self.evictable,
                "protected": self.protected, "lock_mismatch": wrong, "lock_mismatch_nodes": bad,
                "locks_off_tree": len(want), "leaves_walk": len(leaves), "leaves_listed": len(listed),
                "leaves_differ": len(leaves ^ listed)}
