"""What the Host tier of the cachetrace/1 contract keeps between plans: per group, what every Host page holds; every
op in flight and what it pins; the L3 ops awaiting their outcome and the Host pages they hold; the failed reads
a later load or hit must not use; and the tier's counters. Shared by its two kinds of op, each in its own module:
the L2 transfers (``host_tier.HostTier``: write-backs, load-backs, snapshots, restores, ClearCache) and the L3
ops (``host_storage.StorageOps``: gets, puts, queries, cancels and their outcomes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvsim.sim.peers.cachetrace.view import HostTierView

__all__ = ["HostState", "HostPage", "InFlight", "StorageOp", "STORAGE_GET", "STORAGE_PUT", "STORAGE_QUERY",
           "STORAGE_CANCEL", "WRITE_BACK", "LOAD_BACK", "SNAPSHOT", "RESTORE"]

STORAGE_GET, STORAGE_PUT, STORAGE_QUERY, STORAGE_CANCEL = "StorageGetOp", "StoragePutOp", "StorageQueryOp", \
    "StorageCancelOp"

WRITE_BACK, LOAD_BACK, SNAPSHOT, RESTORE = "WriteBackOp", "LoadBackOp", "SnapshotOp", "RestoreOp"


@dataclass
class HostPage:
    """What one Host page holds: the prefix key and last writer of its Device source, and whether the
    write-back that filled it was acknowledged."""
    key: tuple | None
    writer: tuple | None
    op: int
    acked: bool = False
    stored_as: str = ""  # the key the write-back named ("" for an unkeyed store)


@dataclass
class InFlight:
    """An issued, unacknowledged op and what it pins."""
    kind: str
    plan: int
    device_pins: list[tuple[str, int]] = field(default_factory=list)   # (group, Device page)
    host_pins: list[int] = field(default_factory=list)                 # Host pages it reads
    keys: list[tuple[str, str, int]] = field(default_factory=list)     # (group, content hash, offset) stored
    host_dst: list[tuple[str, int]] = field(default_factory=list)      # (group, Host page) it fills
    device_dst: list[tuple[str, int]] = field(default_factory=list)    # (group, Device page) it fills


@dataclass
class StorageOp:
    """An issued L3 op awaiting its outcome: its object keys and (get, put) their Host pages."""
    kind: str
    plan: int
    keys: list[tuple[str | None, str, int]]   # (group id or None when out of range, content hash, offset)
    pages: list[int]
    cancelled: bool = False


class HostState:
    """The Host tier's state (the L2 and L3 ops read and change the same pages) and the helpers both use."""

    exercised: dict[str, int]  # plans or items in which each rule's premise held, set by ``HostTier`` from its RULES

    def __init__(self, contract: HostTierView) -> None:
        self.c = contract
        cfg = contract.config
        self.gids = [g.id for g in cfg.groups]
        self.host_pages = cfg.num_host_pages
        self.max_slot = cfg.max_retracted_requests
        self.snapshot_pages = cfg.num_snapshot_pages
        self.any_replayable = any(g.replayable for g in cfg.groups)
        self.host: dict[str, dict[int, HostPage]] = {g: {} for g in self.gids}
        self.inflight: dict[int, InFlight] = {}
        self.device_pins: dict[tuple[str, int], int] = {}   # pinned Device source -> op id
        self.host_pins: dict[int, int] = {}                  # Host page read by an in-flight load -> op id
        self.keys_in_flight: dict[tuple[str, str, int], int] = {}
        self.failed_dst: dict[str, set[int]] = {g: set() for g in self.gids}
        self.retracted: list[str] = []
        self.l3_filled: dict[int, str] = {}                  # Host page -> object key an L3 prefetch fills it with
        self.storage: dict[int, StorageOp] = {}              # L3 op in flight (until its outcome) by id
        self.storage_issued: set[int] = set()                # every L3 op id issued (a namespace of its own)
        self.host_busy: dict[int, int] = {}                  # Host page an L3 get fills or put reads -> op id
        self.failed_host: dict[str, dict[int, int]] = {g: {} for g in self.gids}  # Host page -> failed get
        self.failed_keys: set[tuple[str, str, int]] = set()  # (group, content hash, offset) a get failed to read
        self.stats = {"write_backs": 0, "load_backs": 0, "snapshots": 0, "restores": 0, "unpinned_stores": 0,
                      "pages_written_back": 0, "pages_loaded": 0, "pages_restored": 0, "acks_held": 0,
                      "clears": 0, "clears_accepted": 0, "storage_ops": 0, "failed_loads": 0,
                      "storage_gets": 0, "storage_puts": 0, "storage_queries": 0, "storage_cancels": 0,
                      "get_keys": 0, "get_keys_failed": 0, "put_keys": 0, "query_keys": 0, "query_hits": 0,
                      "host_served_hits": 0,
                      "unpinned_regranted": 0}

    # -- helpers ----------------------------------------------------------------------------------------------
    def _find(self, rule: str, line: int, message: str, **ctx: Any) -> None:
        self.c.find(rule, line, message, **ctx)

    def _host_id(self, page: int, line: int, what: str, oid: int) -> bool:
        if 0 < page < self.host_pages:
            return True
        self._find("TS-L2-3", line, f"op {oid}: {what} {page} outside the Host pages [1, {self.host_pages})",
                   op_id=oid, page=page)
        return False
