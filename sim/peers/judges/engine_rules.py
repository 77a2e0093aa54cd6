"""The engine step judge's rules as its report lists them: PEER-5 ... PEER-9 and PEER-11, each with its title and
seed clause (``RULES``) and how it reads the seed for engines whose unit is a block of block_size tokens
(``DECISIONS``), read from the rules' entries in the one catalogue (spec.rules.peer_engine; PEER-9 in this judge's
own reading).

Kept apart from the judge (``engine_judge.EngineJudge``, which adds the engine's own eviction-policy rule from
``sim.peers.ENGINE.policy``): the judge counts its findings by these ids, the report prints them from here.
"""

from __future__ import annotations

from kvsim.spec.catalogue import get

__all__ = ["IDS", "RULES", "DECISIONS"]

IDS = ("PEER-5", "PEER-6", "PEER-7", "PEER-8", "PEER-9", "PEER-11")
RULES: dict[str, tuple[str, str]] = {rid: get(rid).stated("engine")[:2] for rid in IDS}
DECISIONS: dict[str, str] = {rid: get(rid).stated("engine")[2] for rid in IDS}
