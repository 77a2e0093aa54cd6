"""Leak detection by reachability: the ownership graph from live address spaces (networkx).

PAGE-4's audit form ("只有当 references、replicas 和 transaction pins 均为零时，descriptor 才能回收"):
roots are live address spaces (active bundles and retained checkpoints) and open transfers; edges go
space -> page, transfer -> page, page -> Device lease, page -> Host slice. Any leased id, Host slice or
live descriptor not reachable from a root is a leak.
"""

from __future__ import annotations

import networkx as nx


def ownership_graph(st) -> nx.DiGraph:
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


def leaked(st) -> str | None:
    """A message naming the first unreachable lease, Host slice or descriptor, or None."""
    g = ownership_graph(st)
    reach = nx.descendants(g, "roots")
    for node in sorted((n for n in g.nodes if n != "roots" and n not in reach), key=repr):
        return f"{node[0]} {node[1:]} is not reachable from any live address space or transfer (leak)"
    return None
