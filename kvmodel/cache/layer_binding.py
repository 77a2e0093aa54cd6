"""LayerBinding: one attention layer's storage group, visibility mask and kernel page span.

Cache concepts, "Storage vs. visibility": "a group must retain every token its layers can see ... a
full-visibility layer cannot ride a sliding group, and a sliding mask must fit inside the group's retention
window (window_left + 1 <= sliding_window_tokens)". A backend's kernel_page_size "comes from the kernel
registry or an explicit config override, never from prefix_granularity as a fallback".
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_SOURCES = ("registry", "config")


@dataclass(frozen=True)
class LayerBinding:
    layer: int
    group: int  # group index
    window_left: int | None  # None: full visibility
    kernel_page_size: int | None = None  # tokens; None for a state consumer (no pages)
    kernel_page_source: str = "registry"  # registry | config (anything else is a derivation)
