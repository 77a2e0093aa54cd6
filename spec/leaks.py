"""Leak detection by reachability over the ownership graph from live address spaces.

PAGE-4's audit form ("只有当 references、replicas 和 transaction pins 均为零时，descriptor 才能回收"):
roots are live address spaces (active bundles and retained checkpoints) and open transfers; edges go
space -> page, transfer -> page, transfer -> destination (Device lease or Host slice), page -> Device lease,
page -> Host slice. Any leased id, Host slice or live descriptor not reachable from a root is a leak.

The graph is three levels deep and every path is root -> (space | transfer) -> page -> replica, so
`unreachable` computes the reachable sets level by level with set unions (linear in the graph, no graph
object: the audit runs every 50,000 events on stores of 10^5 pages and more). `ownership_graph` builds the
same graph as a networkx DiGraph, for drawings and export; tests/rules/test_page.py checks on fuzzed stores
that `unreachable` equals the nodes networkx finds unreachable from "roots".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

    from kvsim.kvmodel.store.store import KVStore


def ownership_graph(st: KVStore) -> nx.DiGraph:
    import networkx as nx  # only for drawings and export: every command would pay its import otherwise
    g = nx.DiGraph()
    g.add_node("roots")
    for space in st.all_spaces():
        g.add_edge("roots", ("space", space.uid))
        for page in space.pages:
            g.add_edge(("space", space.uid), ("page",) + page.handle)
    for x in st.xfers.values():
        g.add_edge("roots", ("xfer", x.xid))
        for page in x.pages:
            g.add_edge(("xfer", x.xid), ("page",) + page.handle)
        for d in x.dest:
            g.add_edge(("xfer", x.xid), ("lease", x.pool, d) if x.direction == "h2d" else ("host", d))
    for store in st.page_stores.values():
        for page in store.live_pages():
            node = ("page",) + page.handle
            g.add_node(node)
            if page.device >= 0:
                g.add_edge(node, ("lease", page.pool, page.device))
            if page.host is not None:
                g.add_edge(node, ("host", page.host.offset))
    for name, pool in st.pools.items():
        for pid in pool.leased_ids():
            g.add_node(("lease", name, pid))
    for off in st.host_slices:
        g.add_node(("host", off))
    return g


def unreachable(st: KVStore) -> list[tuple]:
    """The ownership graph's nodes not reachable from a root (live descriptors, leased ids, Host slices),
    named as in `ownership_graph`, sorted by repr."""
    pages: set = set()  # descriptors reachable from a space or a transfer (level 2)
    leases: set = set()  # (pool, id) and Host offsets reachable (level 3)
    host: set = set()
    for space in st.all_spaces():
        pages.update(space.pages)
    for x in st.xfers.values():
        pages.update(x.pages)
        if x.direction == "h2d":
            leases.update((x.pool, d) for d in x.dest)
        else:
            host.update(x.dest)
    lost: list[tuple] = []
    for store in st.page_stores.values():
        for page in store.live_pages():
            if page not in pages:
                lost.append(("page",) + page.handle)
                continue
            if page.device >= 0:
                leases.add((page.pool, page.device))
            if page.host is not None:
                host.add(page.host.offset)
    for name, pool in st.pools.items():
        lost.extend(("lease", name, pid) for pid in pool.leased_ids() if (name, pid) not in leases)
    lost.extend(("host", off) for off in st.host_slices if off not in host)
    return sorted(lost, key=repr)


def leaked(st: KVStore) -> str | None:
    """A message naming the first unreachable lease, Host slice or descriptor, or None."""
    for node in unreachable(st):
        return f"{node[0]} {node[1:]} is not reachable from any live address space or transfer (leak)"
    return None
