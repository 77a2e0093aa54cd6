"""CacheKey and BoundaryKind: the identity of a cached block and how established its boundary is.

Cache concepts: "Each page hash expands to P/bg keys per group" (research: CacheKey = {group, content
hash, page offset}); boundary kinds kChunk < kEndpoint < kPromoted, only ever raised ("Newly completed
prefill boundaries at the prompt's last aligned checkpoint are classified as Endpoint, unless already
Promoted").
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import NamedTuple


class CacheKey(NamedTuple):
    group: int
    content_hash: str  # the prefix page's chained hash (kvmodel.cache.prefix_hash)
    page_offset: int  # which of the page's P/bg slots


class BoundaryKind(IntEnum):
    CHUNK = 0
    ENDPOINT = 1
    PROMOTED = 2


def keys_for_group(group: int, page_hashes: Iterable[str], slots_per_page: int) -> list[CacheKey]:
    """The group's keys in slot order: slot i is page i // m at offset i % m (m = P / bg)."""
    return [CacheKey(group, h, o) for h in page_hashes for o in range(slots_per_page)]
