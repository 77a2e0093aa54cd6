"""CONS-*: consumers read through paged views within the frozen valid frontier; codec and attention."""

from __future__ import annotations

from kvmodel.store import units

from ..catalogue import transition_rule

transition_rule("CONS-1", "Consumers read through paged views within the frozen valid frontier",
                'store contract: "read domain 不超过该 sequence 的 frozen valid frontier"', units.launch,
                decisions="The model checks a launch's read domain [0, b) holds no stale columns; the lockstep "
                          "driver checks every committed column read back through the paged view.")

transition_rule("CONS-2", "Correctness is independent of physical id order; no whole-context gather",
                'store contract: "Kernel correctness不依赖physical page ID连续性，也不通过gather建立request-contiguous KV"',
                units.launch,
                decisions="Checked by the lockstep driver on the physical implementation.")

transition_rule("CONS-3", "Codec bytes are bit-exact; paged attention equals the FP64 oracle within tolerance",
                'store contract: "Exact persistent codec 由 kv_cache_append.h 定义"', units.launch,
                decisions="Checked by the lockstep driver on the physical implementation.")
