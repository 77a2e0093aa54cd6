"""CacheGroupSpec: what one cache group is (declaration shape, retention, replay, sharding).

Cache concepts: "a group declares it through one of two shapes (Python CacheGroupSpec), and the group's
family is the name of that shape" — row geometry (rows_per_page × entry_stride_tokens, the history
family, full_history or sliding_window retention) or checkpoint_granularity (the state family, always
full_history). "exactly three (family, retention) combinations exist": full, sliding window, Mamba state.
Both shapes fold to one generic span, block_granularity (tokens per block-table slot).

This module speaks tokens only; it knows no blocks, parents, packing or pools ("CacheGroupSpec no
packing").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HISTORY, STATE = "history", "state"
FULL_HISTORY, SLIDING_WINDOW = "full_history", "sliding_window"
# The scheduling form's kind (C++ AttnKind { kFull, kSlidingWindow, kMambaState }).
FULL, SLIDING, MAMBA = "full", "sliding_window", "mamba_state"


class CacheConfigError(ValueError):
    """A group declaration or configuration the cache concepts reject; the message names the rule."""


@dataclass(frozen=True)
class CacheGroupSpec:
    """One group's declaration: exactly one shape (rows | checkpoint) plus policy.

    History: rows_per_page and entry_stride_tokens (page_size = their product); retention full_history or
    sliding_window (then sliding_window_tokens > 0). State: checkpoint_granularity; retention full_history.
    replayable only on a sliding history group. shard_count >= 1 (1 = replicated).
    """

    group_id: str
    rows_per_page: int | None = None
    entry_stride_tokens: int | None = None
    checkpoint_granularity: int | None = None
    retention: str = FULL_HISTORY
    sliding_window_tokens: int | None = None
    replayable: bool = False
    shard_count: int = 1

    def __post_init__(self) -> None:
        rows = self.rows_per_page is not None or self.entry_stride_tokens is not None
        ckpt = self.checkpoint_granularity is not None
        if rows == ckpt:
            raise CacheConfigError(f"group {self.group_id!r}: row geometry and checkpoint_granularity are "
                                   "mutually exclusive and one is required")
        if rows and not (_positive(self.rows_per_page) and _positive(self.entry_stride_tokens)):
            raise CacheConfigError(f"group {self.group_id!r}: rows_per_page and entry_stride_tokens must both "
                                   "be positive")
        if ckpt and not _positive(self.checkpoint_granularity):
            raise CacheConfigError(f"group {self.group_id!r}: checkpoint_granularity must be positive")
        if self.retention not in (FULL_HISTORY, SLIDING_WINDOW):
            raise CacheConfigError(f"group {self.group_id!r}: retention {self.retention!r} is not "
                                   f"{FULL_HISTORY} or {SLIDING_WINDOW}")
        if ckpt and self.retention != FULL_HISTORY:
            raise CacheConfigError(f"group {self.group_id!r}: a state group's retention is always full_history")
        sliding = self.retention == SLIDING_WINDOW
        if sliding != (self.sliding_window_tokens is not None):
            raise CacheConfigError(f"group {self.group_id!r}: sliding_window_tokens is given iff retention is "
                                   "sliding_window")
        if sliding and not _positive(self.sliding_window_tokens):
            raise CacheConfigError(f"group {self.group_id!r}: sliding_window_tokens must be positive")
        if self.replayable and not (rows and sliding):
            raise CacheConfigError(f"group {self.group_id!r}: replayable is set only on a sliding History group")
        if not _positive(self.shard_count):
            raise CacheConfigError(f"group {self.group_id!r}: shard_count must be >= 1")

    @property
    def family(self) -> str:
        return STATE if self.checkpoint_granularity is not None else HISTORY

    @property
    def block_granularity(self) -> int:
        """Tokens one block-table slot covers: the single folding point of both declaration shapes."""
        if self.checkpoint_granularity is not None:
            return self.checkpoint_granularity
        if self.rows_per_page is None or self.entry_stride_tokens is None:  # __post_init__ requires one shape
            raise CacheConfigError(f"group {self.group_id!r}: neither row geometry nor checkpoint_granularity")
        return self.rows_per_page * self.entry_stride_tokens

    @property
    def page_size(self) -> int:
        """The row-geometry reading of block_granularity; a state group has no pages."""
        if self.family == STATE:
            raise TypeError(f"group {self.group_id!r} is a state group: it has no rows and no page_size")
        return self.block_granularity

    @property
    def kind(self) -> str:
        """The scheduling form's kind: full, sliding_window or mamba_state."""
        if self.family == STATE:
            return MAMBA
        return SLIDING if self.retention == SLIDING_WINDOW else FULL

    @property
    def window_tokens(self) -> int | None:
        """W of the retention and matching arithmetic: the sliding window, 2 for state ("SwaMatcher at
        window 2"), None for full history (never expires)."""
        if self.family == STATE:
            return 2
        return self.sliding_window_tokens


def _positive(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


def full(group_id: str, block_granularity: int, **kw: Any) -> CacheGroupSpec:
    """A full-history group with one-token rows."""
    return CacheGroupSpec(group_id, rows_per_page=block_granularity, entry_stride_tokens=1, **kw)


def sliding(group_id: str, block_granularity: int, window_tokens: int, **kw: Any) -> CacheGroupSpec:
    return CacheGroupSpec(group_id, rows_per_page=block_granularity, entry_stride_tokens=1,
                          retention=SLIDING_WINDOW, sliding_window_tokens=window_tokens, **kw)


def state(group_id: str, checkpoint_granularity: int, **kw: Any) -> CacheGroupSpec:
    return CacheGroupSpec(group_id, checkpoint_granularity=checkpoint_granularity, **kw)
