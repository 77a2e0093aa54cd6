"""KVAddressSpace, SequenceKVBundle and retained checkpoints.

Store contract: "每个 continuation 在每个 enabled pool 中持有一个 KVAddressSpace" (ordered logical-block
-> LogicalKVPage membership, committed frontier, checkpoint-protected frontier, active/inactive state,
active growth reservation, optional execution-row lease); "Address space 拥有 logical order；block
table只是 active Device mapping 的执行镜像"; the extents table (entitlement / membership / committed
frontier are distinct) and "一个 active sequence 持有: SequenceKVBundle (Main Text KVAddressSpace,
selected backend KVAddressSpace)".

One owner per fact: an active space owns its reservation (pages guaranteed but not yet materialized);
its entitlement is derived as membership + reservation, so membership obtained by Fork counts toward
the entitlement and a shared page is billed once (as allocated), never reserved again. The pool's
`reserved` is the sum of these reservations.
This module knows nothing of physical ids, rows' tables or traces.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from kvsim.kvmodel.store.config import PAGE_SIZE

if TYPE_CHECKING:
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.units import UnitRow

MASK64 = (1 << 64) - 1
KEY_STRIDE = 0x9E3779B97F4A7C15


def content_key(token: int, position: int) -> int:
    """The 64-bit content key of the column at `position` written under writer `token`.

    DESIGN §4 ("content key ... derived from the sequence lineage and position"): a forked prefix shares
    its source's keys because it shares (or copies) the source's tokens, and a rewrite after a destructive
    truncate uses a new token, so rewritten content never carries an old key.
    """
    return (token ^ (position * KEY_STRIDE)) & MASK64


def writer_token(*parts: object) -> int:
    """A stable 64-bit token from printable parts (seq id, pool, incarnation): content-key lineage."""
    data = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class KVAddressSpace:
    __slots__ = ("uid", "pool", "owner", "pages", "committed", "protected", "active", "reservation",
                 "row", "in_flight", "token", "rewrites", "provisional", "readers", "forced_used")

    def __init__(self, uid: int, pool: str, owner: str) -> None:
        self.uid = uid
        self.pool = pool
        self.owner = owner  # sequence id while active, checkpoint id while retained
        self.pages: list[LogicalKVPage] = []  # membership: logical block b -> LogicalKVPage
        self.committed = 0  # committed frontier in tokens (token-exact)
        self.protected = 0  # checkpoint-protected frontier in tokens
        self.active = False
        self.reservation = 0  # pages guaranteed and not materialized (active spaces only)
        self.row = -1  # execution row, -1 when none (inactive spaces hold none, AS-1)
        # A cache of KVStore.units: the UnitRow of the in-flight unit holding this space (its write range and
        # what launch froze), or None. Only kvmodel.store.units writes it; UNIT-1 checks it against the truth.
        self.in_flight: UnitRow | None = None
        self.token = writer_token(owner, pool, 0)  # content-key lineage of what this space writes
        self.rewrites = 0  # destructive truncations so far (a rewrite gets a new token)
        # the provisional frontier ("max(CommittedFrontier_s,ProvisionalFrontier_s)"): tokens a coming stage
        # mapped (ensure_mapped_to_tokens) and has not yet launched; 0 when none
        self.provisional = 0
        self.readers = 0  # read-only rows of further in-flight units beyond `in_flight` (kvmodel.store.units)
        self.forced_used = False  # bounded completion: its one forced control span beyond the frontier is spent

    @property
    def unit(self) -> str | None:
        """The id of the in-flight unit this space is a row of, or None."""
        r = self.in_flight
        return None if r is None else r.unit

    @property
    def entitlement(self) -> int:
        """Pages guaranteed to this active space: membership + reservation."""
        return len(self.pages) + self.reservation

    @property
    def mapped_tokens(self) -> int:
        return len(self.pages) * PAGE_SIZE

    def new_token(self) -> None:
        """After a destructive truncate, later writes are new content (new content keys): the token chains
        from the current one, which is unique to this incarnation of the sequence id (KVStore.set_token), so
        two incarnations that each truncate and rewrite never share content keys."""
        self.rewrites += 1
        self.token = writer_token(self.token, self.rewrites)

    def snapshot(self) -> tuple:
        return (self.uid, self.pool, self.owner, tuple(p.handle for p in self.pages), self.committed,
                self.protected, self.active, self.reservation, self.row, self.unit, self.token, self.rewrites,
                self.provisional, self.forced_used)


class SequenceKVBundle:
    """An active sequence: one address space per enabled pool (Main first), and its request limits."""

    __slots__ = ("seq", "spaces", "prompt", "budget", "ceiling", "bounded_at", "growth_guess")

    def __init__(self, seq: str, spaces: dict[str, KVAddressSpace], prompt: int, budget: int, ceiling: int) -> None:
        self.seq = seq
        self.spaces = spaces  # pool name -> KVAddressSpace, in the config's pool order
        self.prompt = prompt
        self.budget = budget
        self.ceiling = ceiling  # min(S, prompt + budget): the request's own token ceiling
        self.bounded_at: int | None = None  # kv_lease_growth: frontier of bounded completion once growth failed
        # {pool: entitlement before} while an accepted growth of unstated size is the model's guess
        # (kvmodel.store.mapping.grow); the engine's pool counters at `observe` settle it
        self.growth_guess: dict[str, tuple[int, int]] | None = None  # pool -> (entitlement before, ENT-5 bound)

    def snapshot(self) -> tuple:
        return (self.seq, tuple((k, s.uid) for k, s in self.spaces.items()), self.prompt, self.budget,
                self.ceiling, self.bounded_at, None if self.growth_guess is None else tuple(self.growth_guess.items()))


class Checkpoint:
    """A retained immutable inactive continuation: one inactive space per enabled pool + StateImage."""

    __slots__ = ("ckpt", "spaces", "state_image", "refused_from")

    def __init__(self, ckpt: str, spaces: dict[str, KVAddressSpace], state_image: bool) -> None:
        self.ckpt = ckpt
        self.spaces = spaces
        self.state_image = state_image
        # an activation from this checkpoint was refused: it must still be the complete inactive end state
        # (judgment history for `observe`, not model state: snapshots leave it out)
        self.refused_from = False

    @property
    def frontier(self) -> int:
        """The Main committed frontier of the continuation."""
        return self.spaces["main"].committed

    def snapshot(self) -> tuple:
        return (self.ckpt, tuple((k, s.uid) for k, s in self.spaces.items()), self.state_image)
