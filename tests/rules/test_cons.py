"""CONS-1: consumers read through paged views within the frozen valid frontier.

Seed: "read domain 不超过该 sequence 的 frozen valid frontier" and "Page 内 frontier 之后的 stale bytes 不进入
consumer valid domain". CONS-2 and CONS-3 belong to the physical implementation and are tested there.
"""

from __future__ import annotations

import pytest

from tests.rules.builders import assert_kept, assert_violation, committed, run, small


@pytest.mark.rule("CONS-1", "keeps")
def test_cons1_keeps_reads_within_the_valid_frontier():
    st = small()
    committed(st, "a", 100, budget=200)
    run(st, ("map", "a", "main", 256), ("launch", "v", [("a", "main", (100, 256))]),
        ("complete", "v", [("a", "main", 130)]), ("truncate", "a", "main", 130),  # rejected bytes stay in block 2
        ("launch", "w", [("a", "main", (130, 192))]),  # overwritten canonically before any read reaches them
        ("complete", "w", [("a", "main", 192)]))
    committed(st, "r", 64)
    run(st, ("launch", "x", [("r", "main", None)]), ("complete", "x", []))  # read-only: reads [0, 64)
    assert_kept(st, "CONS-1")


@pytest.mark.rule("CONS-1", "fires")
def test_cons1_fires_on_a_read_over_stale_columns():
    st = small()
    committed(st, "a", 100, budget=100)
    # writes [110, 128) and reads [0, 128): columns 100..109 hold rejected or stale bytes
    assert_violation(st, "CONS-1", "launch", "u", [("a", "main", (110, 128))])
