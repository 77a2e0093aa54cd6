"""Named faults injected into a live peer run's records, so each TS-L2 rule (and TS-ADM-2, TS-TBL-1, TS-POOL-4,
EV-7) can be shown firing on what a real scheduler's plans would look like if it broke that rule (``kvsim peer
tokenspeed --inject-fault NAME``).

A fault perturbs the recorded plan, answer, ClearCache record or KV-event batch once, at the first place it
applies, before the judge sees it (it may read the submissions); the scheduler itself is driven unchanged. ``get(name)``
returns a fresh fault; ``NAMES`` lists them with the rule each breaks.

The faults live by the rules they break: ``host`` (the Host and L3 tiers), ``tables`` (tables, prefix hits,
admission), ``state`` (snapshot-state groups), ``kv_events`` (the event stream), all refining ``base.Fault``.
"""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.faults.base import Fault
from kvsim.sim.peers.tokenspeed.faults.host import (
    AcceptClear,
    DecodeStream,
    FailedGetLoaded,
    FailedLoadPublished,
    KeyedHostLoad,
    RefetchFailedKey,
    RepeatTransfer,
    ReplayableWriteBack,
    SkipStore,
    StoreKeyTwice,
    UnclampedHostPrefix,
    UnpinnedStore,
    UnqueriedGet,
    WrongKey,
    ZeroPinnedSource,
)
from kvsim.sim.peers.tokenspeed.faults.kv_events import EventHash
from kvsim.sim.peers.tokenspeed.faults.state import (
    DecodeStateHit,
    ForeignStateHit,
    MisplacedCheckpoint,
    SkipEndpoint,
    UnkeyedStateStore,
)
from kvsim.sim.peers.tokenspeed.faults.tables import (
    AdmitOverBound,
    FlatReadmission,
    FullRowHole,
    GaugeOff,
    HitServedAsCopy,
    ReplayableHit,
)
from kvsim.sim.trace import cachetrace as ct

__all__ = ["NAMES", "Fault", "get"]

_FAULTS: dict[str, type[Fault]] = {f.name: f for f in (ZeroPinnedSource, UnpinnedStore, RepeatTransfer,
                                                       StoreKeyTwice, KeyedHostLoad, WrongKey,
                                                       ReplayableWriteBack, AcceptClear, DecodeStream,
                                                       FailedLoadPublished, SkipStore,
                                                       ReplayableHit, FlatReadmission, FailedGetLoaded,
                                                       UnclampedHostPrefix, HitServedAsCopy, FullRowHole,
                                                       EventHash, ForeignStateHit, DecodeStateHit,
                                                       MisplacedCheckpoint, SkipEndpoint, UnkeyedStateStore,
                                                       AdmitOverBound, GaugeOff, UnqueriedGet, RefetchFailedKey)}


NAMES: dict[str, str] = {name: f.rule for name, f in _FAULTS.items()}


WHY: dict[str, str] = {name: f.why for name, f in _FAULTS.items()}


def get(name: str, config: ct.Config) -> Fault:
    """A fresh fault by name, for a run under ``config`` (``KeyError`` names the known ones)."""
    if name not in _FAULTS:
        raise KeyError(f"unknown fault {name!r} (known: {', '.join(sorted(_FAULTS))})")
    return _FAULTS[name](config)
