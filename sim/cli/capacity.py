"""`kvsim capacity`: capacity resolution and the byte tables of a configuration.

Everything printed comes from the model's own resolution (kvmodel.store.capacity) and typed plane
inventory (kvmodel.store.planes): the same figures the replay uses.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from kvsim.kvmodel.store import (
    PROFILES,
    BackendConfig,
    CapacityPolicy,
    KVStore,
    ModelGeometry,
    StoreConfig,
    bytes_per_token_head,
)
from kvsim.sim.cli.argtypes import byte_size, integer
from kvsim.sim.cli.common import InputError, output_style
from kvsim.sim.report.console import print_table
from kvsim.sim.trace.config import store_for, store_for_config
from kvsim.sim.trace.stream import open_trace


def add_parser(sub) -> None:
    cap = sub.add_parser("capacity", help="capacity and byte tables for a configuration",
                         description="Capacity resolution and byte tables of a store configuration: from a "
                         "trace's header, or from the options below (model geometry: --layers full-attention "
                         "layers of --kv-heads KV heads at head_dim 256).")
    cap.add_argument("trace", nargs="?", metavar="TRACE",
                     help="take the configuration from this trace's header ('-': standard input)")
    cap.add_argument("--max-context", type=integer(1), default=4096, help="S, the longest sequence in tokens")
    cap.add_argument("--concurrency", type=integer(1), default=4, help="C, execution rows (max_concurrency)")
    cap.add_argument("--profile", default="bf16", choices=PROFILES, help="KV plane profile")
    cap.add_argument("--backend", default="off", type=backend_spec, help="off | mtp:K | dflash:FULL_LAYERS | dflash2")
    cap.add_argument("--layers", type=integer(1), default=1, help="full-attention layers of the model")
    cap.add_argument("--kv-heads", type=integer(1), default=2, help="KV heads per layer (head_dim is 256)")
    cap.add_argument("--kv-tokens", type=integer(1), help="explicit kv_capacity in tokens (default: M_max = "
                     "concurrency·ceil(max_context/64) pages, unless --free-bytes)")
    cap.add_argument("--free-bytes", type=byte_size, help="automatic kv_capacity: free Device bytes, e.g. 40G "
                     "(default: none)")
    cap.add_argument("--headroom-bytes", type=byte_size, default=0, help="automatic kv_capacity: bytes kept free")
    cap.add_argument("--reserved-bytes", type=byte_size, default=0, help="Device bytes reserved outside the pools")
    cap.add_argument("--json", action="store_true", help="print the figures as JSON")
    cap.set_defaults(fn=run)


def run(args) -> int:
    return capacity_command(args, Console())


def backend_spec(text: str) -> BackendConfig:
    """``off`` | ``mtp:K`` (draft window K >= 1, default 1) | ``dflash:N`` (N >= 0 full layers, default 1) |
    ``dflash2``."""
    kind, _, n = text.partition(":")
    try:
        if kind == "mtp":
            k = int(n or 1)
            if k < 1:
                raise ValueError(k)
            return BackendConfig("mtp", draft_window=k)
        if kind in ("dflash", "dflash2"):
            layers = int(n or (1 if kind == "dflash" else 0))
            if layers < 0:
                raise ValueError(layers)
            return BackendConfig(kind, full_layers=layers)
        if kind == "off" and not n:
            return BackendConfig("off")
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"must be off, mtp:K (K >= 1), dflash:N (N >= 0) or dflash2 (got {text!r})")


def config_from_args(args) -> StoreConfig:
    backend = args.backend if isinstance(args.backend, BackendConfig) else backend_spec(args.backend)
    if args.kv_tokens is not None:
        cap = CapacityPolicy(tokens=args.kv_tokens)
    elif args.free_bytes is not None:
        cap = CapacityPolicy(free_bytes=args.free_bytes, headroom_bytes=args.headroom_bytes)
    else:
        cap = CapacityPolicy()
    return StoreConfig(max_context=args.max_context, max_concurrency=args.concurrency, kv_profile=args.profile,
                       backend=backend, capacity=cap, model=ModelGeometry(args.layers, args.kv_heads, 256),
                       reserved_bytes=args.reserved_bytes)


def capacity_facts(st: KVStore) -> dict:
    res, cfg = st.resolution, st.config
    return {
        "config": {"max_context": cfg.max_context, "max_concurrency": cfg.max_concurrency, "page_size": st.P,
                   "kv_profile": cfg.kv_profile, "backend": cfg.backend.kind, "logical_pages": cfg.logical_pages},
        "capacity": {"policy": res.policy, "m_min": res.curve.m_min, "m_max": res.curve.m_max, "m": res.m,
                     "tokens": res.token_capacity, "b_min": res.curve.b_min, "b_step": res.curve.b_step,
                     "reservation_bytes": res.layout.reservation_bytes},
        "pools": [{"pool": g.name, "order": g.order, "layers": g.layers, "kv_heads": g.kv_heads,
                   "head_dim": g.head_dim, "pages": g.pages, "page_bytes": g.page_bytes,
                   "startup_bytes": g.startup_bytes,
                   "planes": [{"part": p.part, "role": p.role, "dtype": p.dtype, "extent": p.extent,
                               "bytes_per_token_head": p.bytes_per_token_head} for p in g.planes]}
                  for g in res.layout.pools],
        "profiles_d256": {p: bytes_per_token_head(p, 256) for p in PROFILES},
    }


def capacity_command(args, console) -> int:
    if args.trace:
        with open_trace(args.trace) as r:
            st = store_for(r.header, r.path)
    else:
        from kvsim.sim.trace.stream import TraceInputError
        try:
            st = store_for_config(config_from_args(args))
        except TraceInputError as exc:
            raise InputError(f"kvsim capacity: {exc.reason}") from None
    facts = capacity_facts(st)
    if args.json:
        sys.stdout.write(json.dumps(facts, indent=2) + "\n")
        return 0
    c = facts["capacity"]
    console.print(f"capacity ({c['policy']}): M = {c['m']} pages = {c['tokens']:,} tokens, "
                  f"M_min {c['m_min']}, M_max {c['m_max']}; B(M) = {c['reservation_bytes']:,} B "
                  f"(B_min {c['b_min']:,} + (M − M_min)·{c['b_step']:,})",
                  markup=False, highlight=False, soft_wrap=True)
    t = Table(title="pools")
    for col in ("pool", "order", "layers", "kv heads", "head dim", "pages", "PageBytes", "startup bytes"):
        t.add_column(col, justify="right" if col not in ("pool", "order") else "left")
    for g in facts["pools"]:
        t.add_row(g["pool"], g["order"], str(g["layers"]), str(g["kv_heads"]), str(g["head_dim"]), f"{g['pages']:,}",
                  f"{g['page_bytes']:,}", f"{g['startup_bytes']:,}")
    plain = output_style(args, console).plain
    print_table(t, console, plain)
    t = Table(title="planes per layer (bytes per token per KV head)")
    for col in ("pool", "part", "role", "dtype", "X", "bytes"):
        t.add_column(col)
    for g in facts["pools"]:
        for p in g["planes"]:
            t.add_row(g["pool"], p["part"], p["role"], p["dtype"], str(p["extent"]), str(p["bytes_per_token_head"]))
    print_table(t, console, plain)
    t = Table(title="profiles at D = 256 (K+V bytes per token per head)")
    t.add_column("profile")
    t.add_column("bytes", justify="right")
    for p, b in facts["profiles_d256"].items():
        t.add_row(p, str(b))
    print_table(t, console, plain)
    return 0
