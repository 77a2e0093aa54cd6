"""Effects: the page-payload copies a transaction requires of the physical side, as small records.

The model moves no bytes; a transaction that needs payload moved (a COW tail or `cow` copy of committed
columns, a Host restore, a D2H copy into the packed Host buffer) or that ends a lease says so with one
of these records. A consumer (the lockstep driver) asks `KVStore.record_effects()` once and drains them
with `KVStore.take_effects()` after every applied event, in order; nobody else clears them.
Records are frozen `msgspec.Struct`s of ints and strings (built in C, never part of a reference cycle).
This module knows nothing of planes, codecs or traces.
"""

from __future__ import annotations

import msgspec


class CopyColumns(msgspec.Struct, frozen=True, gc=False):
    """Copy the first `columns` columns of Device page `src` into Device page `dst` (COW)."""

    pool: str
    src: int
    dst: int
    columns: int


class HostToDevice(msgspec.Struct, frozen=True, gc=False):
    """Restore the Host slice at `host_offset` into Device page `dst`."""

    pool: str
    host_offset: int
    dst: int


class DeviceToHost(msgspec.Struct, frozen=True, gc=False):
    """Pack Device page `src` into the Host slice at `host_offset`."""

    pool: str
    src: int
    host_offset: int


class FreeLease(msgspec.Struct, frozen=True, gc=False):
    """Device page `page`'s lease ended: its payload is dead."""

    pool: str
    page: int


class Relabel(msgspec.Struct, frozen=True, gc=False):
    """Guessed Device ids moved to the ids the engine named (kvmodel.store.adopt): each payload at `old`
    moves to `new`, all read before any is written (the moves may form a permutation)."""

    pool: str
    pairs: tuple  # ((old, new), ...)


class HostMove(msgspec.Struct, frozen=True, gc=False):
    """A guessed Host placement moved (kvmodel.store.host_place): the slice at `old` is now at `new`."""

    pool: str
    old: int
    new: int
