"""The narrow read interface through which the fuzzing oracle sees the store model.

Everything the refinement check reads from the model goes through `ModelView`: which sequences and
checkpoints are live, each one's committed frontier and its content read through a valid replica
(Device or Host, whichever is valid: `kvmodel.store.observe.committed_content`, the same reading an
`observe` event's `content` is compared with on replay), which replicas of each member page are valid,
the pool counters, the page stride of each
pool, and an opaque snapshot of the whole state (compared for equality only).
Physical page ids (`device_ids`, `free_ids`) are read only by a machine playing an engine that chooses
its own pages (an activation result the model must adopt); the oracle never sees them.
Nothing else of the model's representation may be used by the oracle or the machines.
"""

from __future__ import annotations

from kvsim.kvmodel.store.observe import committed_content


class ModelView:
    __slots__ = ("st",)

    def __init__(self, store) -> None:
        self.st = store

    def seqs(self) -> set:
        return set(self.st.bundles)

    def ckpts(self) -> set:
        return set(self.st.checkpoints)

    def _space(self, kind: str, owner: str, pool: str):
        holder = (self.st.bundles if kind == "seq" else self.st.checkpoints).get(owner)
        return None if holder is None else holder.spaces.get(pool)

    def frontier(self, kind: str, owner: str, pool: str) -> int | None:
        s = self._space(kind, owner, pool)
        return None if s is None else s.committed

    def content(self, kind: str, owner: str, pool: str) -> tuple[list[int], int | None]:
        """Keys of [0, frontier) through valid replicas, and the first unreadable position (or None)."""
        s = self._space(kind, owner, pool)
        return ([], 0) if s is None else committed_content(self.st, s)

    def replicas(self, kind: str, owner: str, pool: str) -> list[tuple[bool, bool]]:
        """Per member page: (a valid Device replica, a valid Host replica) for its committed columns."""
        s = self._space(kind, owner, pool)
        return [] if s is None else [(p.device_valid(p.committed), p.host_valid(p.committed)) for p in s.pages]

    def device_ids(self, kind: str, owner: str, pool: str) -> list[int]:
        """Physical page ids of the member pages (-1: no Device replica): what an engine's own tables say."""
        s = self._space(kind, owner, pool)
        return [] if s is None else [p.device for p in s.pages]

    def confirmed(self, pool: str, pid: int) -> bool:
        """A lease whose id the engine has named (not the model's guess, which an engine's pick may displace)."""
        return (pool, pid) not in self.st.guessed

    def free_ids(self, pool: str) -> list[int]:
        """Unleased physical page ids, lowest first: what an engine's allocator could hand out."""
        p = self.st.pools[pool]
        return [i for i in range(p.capacity) if p.is_free(i)]

    def counters(self, pool: str) -> dict:
        c = self.st.pool_counters(pool)
        return {k: c[k] for k in ("allocated", "reserved", "available")}

    def capacity(self, pool: str) -> int:
        return self.st.pool_counters(pool)["capacity"]

    def page_bytes(self, pool: str) -> int:
        return self.st.pools[pool].page_bytes

    def snapshot(self):
        return self.st.snapshot()
