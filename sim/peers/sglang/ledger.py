"""Which SGLang frame last changed each page, radix-tree node and request, and the whole structure of the tree and
the page allocator: run inside the SGLang driver's process (imported by ``driver.py`` as a sibling script module;
never imported by kvsim).

Thin wrappers, installed once per process on the classes (never an edit of SGLang's files), record per page the
last allocator call that handled it (``alloc``, ``free``, ``free_segment``, ``free_page_ids``) and per node the
last tree call that changed it (``inc_lock_ref`` / ``dec_lock_ref`` along the path they walk, ``_split_node``,
``_insert_helper``, ``_delete_leaf``): the function called (file:line of its ``def``, whatever module defined
it: a patched-in function names its own file) and the line that called it (SGLang's own, or the driver's: the
driver plays SGLang's scheduler). Per request: the last of those calls made while the driver handled it.

``walk`` reads the whole structure the engine's own asserts rely on, every ``probe_every`` steps and when SGLang
raised: every page 1..N owned exactly once -- free in the allocator, held by a tree node, or private to a live
request's row (a page owned twice is freed while in use, or freed twice; a page owned by nobody leaked) -- and
every tree node linked both ways (``child.parent`` is the node whose ``children`` hold it, under the key SGLang
files it by), its value as long as its key, its ``lock_ref`` never negative, and ``evictable_leaves`` naming only
nodes in the tree. kvsim judges these facts (PEER-14); this module only reads.
"""

import os
import sys
import time
from typing import Any

HERE = {os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")}
NO_FRAME = -1


class Ledger:
    """The per-page / per-node / per-request last-change frames of one trial and what changed since ``take``."""

    def __init__(self, root: str, page_size: int, where: dict) -> None:
        self.root = root          # the folder holding the sglang package (site-packages)
        self.ps = page_size
        self.where = where        # the driver's own record of the request it is handling
        self.ids: dict[tuple, int] = {}
        self.fresh: list[list] = []
        self.page: dict[int, int] = {}
        self.node: dict[int, int] = {}
        self.req: dict[str, int] = {}
        self.dirty_pages: set[int] = set()
        self.dirty_nodes: set[int] = set()
        self.dirty_req: set[str] = set()
        self.changes = 0          # wrapped calls so far: the structure can only have changed when this moved
        self.cost = 0.0

    def _where(self, code: Any, line: int) -> str:
        fn = code.co_filename
        shown = os.path.relpath(fn, self.root) if fn.startswith(self.root + os.sep) else os.path.basename(fn)
        return f"{shown}:{line} in {code.co_name}"

    def frame(self, verb: str, func: Any, depth: int = 2) -> int:
        """The id of ``verb`` by ``func`` (a code object), called from the first caller frame outside this module
        (the driver's own lines count: it is SGLang's scheduler here)."""
        f: Any = sys._getframe(depth)
        while f is not None and f.f_code.co_filename == os.path.abspath(__file__):
            f = f.f_back
        key = (verb, func, None if f is None else f.f_code, 0 if f is None else f.f_lineno)
        fid = self.ids.get(key)
        if fid is None:
            fid = self.ids[key] = len(self.ids)
            text = f"{verb} by {self._where(func, func.co_firstlineno)}"
            if f is not None:
                text += f", called from {self._where(f.f_code, f.f_lineno)}"
            self.fresh.append([fid, text])
        return fid

    def pages(self, fid: int, pages: list[int]) -> None:
        self.changes += 1
        for p in pages:
            self.page[p] = fid
        self.dirty_pages.update(pages)
        self._request(fid)

    def nodes(self, fid: int, ids: list[int]) -> None:
        self.changes += 1
        for n in ids:
            self.node[n] = fid
        self.dirty_nodes.update(ids)
        self._request(fid)

    def _request(self, fid: int) -> None:
        rid = self.where.get("request")
        if rid is not None:
            self.req[rid] = fid
            self.dirty_req.add(rid)

    def take(self) -> dict:
        """What changed since the last call: ``[id, frame]`` per page, node and request, and the new frames."""
        t0 = time.perf_counter()
        out = {"pages": sorted([p, self.page[p]] for p in self.dirty_pages),
               "nodes": sorted([n, self.node[n]] for n in self.dirty_nodes),
               "requests": sorted([r, self.req[r]] for r in self.dirty_req), "frames": self.fresh}
        self.fresh = []
        self.dirty_pages, self.dirty_nodes, self.dirty_req = set(), set(), set()
        self.cost += time.perf_counter() - t0
        return out


CURRENT: list = [None]   # the ledger of the trial running now (wrappers are installed once per process)


def _page_ids(t: Any, ps: int) -> list[int]:
    """Page ids of a tensor of token slots (``ps`` consecutive slots per page), each once, in order."""
    if t is None or t.numel() == 0:
        return []
    return sorted(set((t // ps).tolist()))


def install(alloc_cls: Any) -> None:
    """Wrap the allocator class in use and RadixCache (class-level, once per process)."""
    from sglang.srt.mem_cache.radix_cache import RadixCache

    clock = time.perf_counter
    if not getattr(alloc_cls, "_kvsim_ledger", False):
        alloc_cls._kvsim_ledger = True

        def alloc_call(name: str, verb: str, pages_of: Any) -> None:
            orig = getattr(alloc_cls, name, None)
            if orig is None:
                return
            code = getattr(orig, "__wrapped__", orig).__code__

            def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
                led = CURRENT[0]
                out = orig(self, *args, **kw)
                if led is not None:
                    t0 = clock()
                    pages = pages_of(args, kw, out, led.ps)
                    if pages:
                        led.pages(led.frame(verb, code), pages)
                    led.cost += clock() - t0
                return out
            setattr(alloc_cls, name, wrapper)

        def first_arg(args: tuple, kw: dict, out: Any, ps: int) -> list[int]:
            return _page_ids(args[0] if args else next(iter(kw.values()), None), ps)

        alloc_call("alloc", "allocated", lambda a, k, out, ps: _page_ids(out, ps))
        alloc_call("free", "freed", first_arg)
        alloc_call("free_segment", "freed", first_arg)
        alloc_call("free_page_ids", "freed", lambda a, k, out, ps: sorted(set(
            (a[0] if a else next(iter(k.values()))).tolist())))

    if getattr(RadixCache, "_kvsim_ledger", False):
        return
    RadixCache._kvsim_ledger = True

    def path(node: Any, root: Any) -> list[int]:
        out = []
        while node is not None and node is not root:
            out.append(node.id)
            node = node.parent
        return out

    def tree_call(name: str, verb: str, nodes_of: Any) -> None:
        orig = getattr(RadixCache, name)
        code = getattr(orig, "__wrapped__", orig).__code__  # the driver's path counters wrap some of them

        def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            led = CURRENT[0]
            if led is None:
                return orig(self, *args, **kw)
            t0 = clock()
            before = nodes_of(self, args, None, True)
            t1 = clock()
            out = orig(self, *args, **kw)
            t2 = clock()
            ids = before + nodes_of(self, args, out, False)
            if ids:
                fid = led.frame(verb, code)
                led.nodes(fid, ids)
            led.cost += (t1 - t0) + (clock() - t2)
            return out
        setattr(RadixCache, name, wrapper)

    tree_call("inc_lock_ref", "locked", lambda t, a, out, pre: path(a[0], t.root_node) if pre else [])
    tree_call("dec_lock_ref", "unlocked", lambda t, a, out, pre: path(a[0], t.root_node) if pre else [])
    tree_call("_split_node", "split", lambda t, a, out, pre: [] if pre else [out.id, a[1].id])
    tree_call("_delete_leaf", "deleted", lambda t, a, out, pre: [a[0].id] if pre else [])
    tree_call("_insert_helper", "inserted", lambda t, a, out, pre: [] if pre or out[1] is t.root_node else
              [out[1].id])


def _free_pages(alloc: Any) -> Any:
    import torch
    parts = [alloc.free_pages]
    parts += list(getattr(alloc, "staged_pages", None) or [])
    rel = getattr(alloc, "release_pages", None)
    if rel is not None and not isinstance(rel, list):
        parts.append(rel)
    return torch.cat([p.reshape(-1) for p in parts]) if parts else torch.empty((0,), dtype=torch.int64)


def walk(tree: Any, alloc: Any, rows: list, num_pages: int, ps: int) -> dict:
    """The whole tree and page ownership (see the module docstring). ``rows``: the live requests' private token
    slots (their rows past the tree-owned part). O(pool): every ``probe_every`` steps and when SGLang raised."""
    import torch

    bad_links: list[int] = []
    bad_len: list[int] = []
    negative: list[int] = []
    tree_slots = []
    seen: set[int] = set()
    root = tree.root_node
    stack = [root]
    nodes = 0
    limit = 4 * num_pages * max(1, ps) + 16
    while stack and nodes <= limit:
        node = stack.pop()
        if id(node) in seen:
            bad_links.append(node.id)
            continue
        seen.add(id(node))
        nodes += 1
        for key, child in list(node.children.items()):
            if child.parent is not node or (child.key is not None and len(child.key) and
                                            key != child.key.child_key(ps)):
                if len(bad_links) < 16:
                    bad_links.append(child.id)
            stack.append(child)
        if node is root:
            continue
        if node.lock_ref < 0 and len(negative) < 16:
            negative.append(node.id)
        if node.value is None or node.key is None or len(node.value) != len(node.key):
            if len(bad_len) < 16:
                bad_len.append(node.id)
        elif len(node.value):
            tree_slots.append(node.value[::ps].reshape(-1))  # one slot per page: a page held twice counts twice
    listed_off = [n.id for n in tree.evictable_leaves if id(n) not in seen][:16]
    n = num_pages + 1

    def count(pages: Any) -> Any:
        return torch.bincount(pages.to(torch.int64), minlength=n)[:n] if pages.numel() else torch.zeros(
            n, dtype=torch.int64)

    free_n = count(_free_pages(alloc))
    tree_n = count(torch.cat(tree_slots) // ps if tree_slots else torch.empty((0,), dtype=torch.int64))
    private = [r[::ps] // ps for r in rows if r is not None and r.numel()]
    row_n = count(torch.cat(private) if private else torch.empty((0,), dtype=torch.int64))
    owners = free_n + tree_n + row_n
    owners[0] = 1  # page 0 is SGLang's padding slot: never handed out, owned by nobody by design
    lost = (owners == 0).nonzero().reshape(-1)
    double = (owners > 1).nonzero().reshape(-1)
    return {"nodes": nodes, "bad_links": bad_links, "bad_len": bad_len, "negative": negative,
            "listed_off_tree": listed_off, "lost": lost[:16].tolist(), "lost_n": int(lost.numel()),
            "double": [[int(p), int(free_n[p]), int(tree_n[p]), int(row_n[p])] for p in double[:16].tolist()],
            "double_n": int(double.numel())}


def probe(tree: Any, locks: list) -> dict:
    """The tree's deep counters, read from its own structures: walked from the root, the tokens of nodes with
    ``lock_ref == 0`` and ``> 0`` beside ``evictable_size_`` / ``protected_size_``; each node's ``lock_ref``
    against the locks this driver holds at or below it (the first eight disagreements named by node id); the
    evictable leaves (unlocked, no live child) beside ``evictable_leaves``. O(nodes): every ``probe_every``
    steps."""
    root = tree.root_node
    want: dict[int, int] = {}
    for node in locks:
        while node is not None and node is not root:
            want[id(node)] = want.get(id(node), 0) + 1
            node = node.parent
    evictable = protected = nodes = 0
    bad: list = []
    wrong = 0
    leaves = set()
    stack = [root]
    while stack:
        node = stack.pop()
        live = [c for c in node.children.values() if not c.evicted]
        stack.extend(live)
        if node is root:
            continue
        nodes += 1
        if node.lock_ref == 0:
            evictable += len(node.key)
            if not live:
                leaves.add(id(node))
        else:
            protected += len(node.key)
        expect = want.pop(id(node), 0)
        if node.lock_ref != expect:
            wrong += 1
            if len(bad) < 8:
                bad.append([node.id, node.lock_ref, expect])
    listed = {id(x) for x in tree.evictable_leaves}
    return {"nodes": nodes, "evictable_walk": evictable, "protected_walk": protected,
            "evictable": tree.evictable_size_, "protected": tree.protected_size_, "lock_mismatch": wrong,
            "lock_mismatch_nodes": bad, "locks_off_tree": len(want), "leaves_walk": len(leaves),
            "leaves_listed": len(listed), "leaves_differ": len(leaves ^ listed)}
