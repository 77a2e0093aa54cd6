"""What each part of the cachetrace/1 contract judge reads of the contract that owns it.

``contract.Contract`` keeps the facts every part judges by -- the configuration, the live tables (which request
names which block), what each Device block holds and who last wrote it -- and hands itself to each part it
owns. A part types that handle with the narrow view below that names exactly what it reads, so it depends on
this module and never on ``contract`` (which imports every part). The type checker proves at each hand-over
that the contract satisfies the view. Where a part reads another part's state (the Host tier's held pages,
the state groups' rows, the write-back policy's room) it reads it through the contract, under the names given
here, so one owner keeps each fact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any, Protocol

from kvsim.sim.trace import cachetrace as ct

__all__ = ["RequestView", "Findings", "Tables", "Contents", "StateRows", "HostRoom", "HeldPages", "L3Op", "HostHolds",
           "HostTierView", "StateGroupView", "StorePolicyView", "CapacityView", "EvictionView", "PrefixHitsView"]


class RequestView(Protocol):
    """A submitted request as the contract keeps it: its prompt and the tokens its results produced, its prefix
    keys, how far it computed, its rows and (retracted) the image its pages were."""

    @property
    def rid(self) -> str: ...
    @property
    def tokens(self) -> Any: ...            # the prompt's token ids (a list, or the workload's array)
    @property
    def generated(self) -> list[int]: ...
    @property
    def computed(self) -> int: ...          # tokens computed so far
    @property
    def prefill(self) -> int: ...           # prompt tokens
    @property
    def hit(self) -> int: ...               # the prefix hit of its first extend
    @property
    def rows(self) -> dict[str, list[int]]: ...
    @property
    def image(self) -> dict[str, set[int]]: ...

    def digest(self, page: int, p: int) -> bytes | None:
        """The prefix key of page ``page`` (None while its tokens are not all known)."""
        ...

    def token_slice(self, a: int, b: int) -> Any:
        """Tokens [a, b) of prompt then output."""
        ...


class Findings(Protocol):
    """Where a part's findings and rule premises are counted: the contract's, in the plan being judged."""

    @property
    def current_plan(self) -> int: ...
    @property
    def exercised(self) -> dict[str, int]: ...

    def find(self, rule: str, line: int, message: str, *, cause: str | None = None, about: tuple = (),
             **ctx: Any) -> None: ...


class Tables(Protocol):
    """The configuration and the live tables: per group, how many live slots name each block, and the blocks
    handed out fresh that no table named yet."""

    @property
    def config(self) -> ct.Config: ...
    @property
    def p(self) -> int: ...                 # prefix_granularity
    @property
    def groups(self) -> Mapping[str, ct.Group]: ...
    @property
    def reqs(self) -> Mapping[str, RequestView]: ...
    @property
    def holders(self) -> Mapping[str, dict[int, int]]: ...
    @property
    def handed(self) -> Mapping[str, set[int]]: ...


class Contents(Protocol):
    """Per group, what each Device block holds: its prefix key and page offset, and the (request, slot) that
    last wrote it."""

    @property
    def content(self) -> Mapping[str, dict[int, tuple]]: ...
    @property
    def writer(self) -> Mapping[str, dict[int, tuple]]: ...


class StateRows(Protocol):
    """The state groups' ids and their rows (group -> request -> row), kept by ``state_group.StateGroups``."""

    @property
    def ids(self) -> Sequence[str]: ...
    @property
    def rows(self) -> Mapping[str, dict[str, list[int]]]: ...


class HostRoom(Protocol):
    """What the write-back policy (``store_policy.StorePolicy``) knows of the Host tier's room."""

    @property
    def full_now(self) -> bool: ...         # this plan's write-backs took all the Host room there was
    @property
    def drained(self) -> bool: ...          # the last plan scheduled nothing and issued no cache op

    def room(self) -> int:
        """Host pages a write-back may take now."""
        ...


class HeldPages(Protocol):
    """An unacknowledged Host-tier op: the Host pages it fills and the ones it reads."""

    @property
    def host_dst(self) -> list[tuple[str, int]]: ...
    @property
    def host_pins(self) -> list[int]: ...


class L3Op(Protocol):
    """An L3 op awaiting its outcome: its kind and (get, put) the Host pages it holds."""

    @property
    def kind(self) -> str: ...
    @property
    def pages(self) -> list[int]: ...


class HostHolds(Protocol):
    """The Host pages the Host tier (``host_tier.HostTier``) holds for ops in flight."""

    @property
    def storage(self) -> Mapping[int, L3Op]: ...
    @property
    def host_busy(self) -> Mapping[int, int]: ...   # Host page an L3 get fills or a put reads -> op id
    @property
    def inflight(self) -> Mapping[int, HeldPages]: ...


class HostTierView(Findings, Tables, Contents, Protocol):
    """What ``host_tier.HostTier`` reads: the tables and contents its ops copy, and the state groups' rows."""

    @property
    def state(self) -> StateRows: ...


class StateGroupView(Findings, Tables, Protocol):
    """What ``state_group.StateGroups`` reads: the tables, and the write-back policy's Host room."""

    @property
    def stores(self) -> HostRoom: ...


class StorePolicyView(Findings, Tables, Contents, Protocol):
    """What ``store_policy.StorePolicy`` reads: the tables and contents, and the Host pages ops hold."""

    @property
    def l2(self) -> HostHolds: ...


class CapacityView(Findings, Tables, Protocol):
    """What ``capacity.Capacity`` reads: the configuration, the live tables and the state groups' rows."""

    @property
    def state(self) -> StateRows: ...


class EvictionView(Findings, Tables, Contents, Protocol):
    """What ``eviction.check`` reads: the live tables and what each block holds."""


class PrefixHitsView(Findings, Tables, Contents, Protocol):
    """What ``hits.PrefixHits`` reads: the tables and contents a hit names, and the prefix keys earlier plans
    published."""

    @property
    def published(self) -> Set[bytes]: ...
