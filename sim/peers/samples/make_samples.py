"""Regenerate the KV-event sample logs of this folder: ``python sim/peers/samples/make_samples.py``.

* ``vllm_array_sha256.jsonl`` -- a clean log in vLLM's array wire form (``[ts, [event, ...], dp_rank]``,
  array-like events, medium ``GPU``), block size 4, SHA-256 hashes in TokenSpeed's prefix framing (hex);
  two requests sharing a prefix, an eviction, a cache reset and a restore.
* ``sglang_object_sha256.jsonl`` -- the same stream in object form (``{"ts", "events": [{"type": ...}]}``).
* ``faulty/*.jsonl`` -- one crafted fault per check (EV-8: object batches carrying ``seq``), named after the
  rule; ``expect.json`` says which finding
  each must produce at which line and under which options.

``tokenspeed_events.jsonl`` is not made here: it is the KV-event log of the real scheduler (see README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvsim.kvmodel.cache.prefix_hash import page_digest

HERE = Path(__file__).resolve().parent
BS = 4


def chain(tokens, parent=None):
    """Hex SHA-256 hashes of the whole blocks of ``tokens`` chained onto ``parent``."""
    out, prior = [], b"" if parent is None else bytes.fromhex(parent)
    for i in range(0, len(tokens) - len(tokens) % BS, BS):
        prior = page_digest(prior, tokens[i:i + BS])
        out.append(prior.hex())
    return out


A = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]          # request a: 3 blocks
B = [11, 12, 13, 14, 15, 16, 17, 18, 31, 32, 33, 34]          # request b: shares a's first 2 blocks
HA, HB = chain(A), chain(B)


def stored(hashes, parent, tokens):
    return ["BlockStored", hashes, parent, tokens, BS, None, "GPU"]


def removed(hashes):
    return ["BlockRemoved", hashes, "GPU"]


CLEAN = [
    [1.0, [stored(HA, None, A)], None],
    [2.0, [stored(HB[2:], HB[1], B[8:])], None],
    [3.0, [removed([HA[2]])], None],
    [4.0, [removed([HB[2]]), removed([HA[1], HA[0]])], None],
    [5.0, [stored(HA[:2], None, A[:8])], None],
    [6.0, [["AllBlocksCleared"]], None],
    [7.0, [stored(HB, None, B)], None],
]


def as_object(batch):
    ts, events, rank = batch
    names = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"),
             "BlockRemoved": ("block_hashes", "medium"), "AllBlocksCleared": ()}
    return {"ts": ts, "events": [{"type": e[0], **dict(zip(names[e[0]], e[1:], strict=False))} for e in events],
            "data_parallel_rank": rank}


# one fault per check: (file, batches, options, expected [rule, line])
FAULTS = [
    ("EV-1_remove_never_stored", [CLEAN[0], [2.0, [removed([HB[2]])], None]], {}, [["EV-1", 2]]),
    ("EV-1_remove_twice", [CLEAN[0], CLEAN[2], [3.5, [removed([HA[2]])], None]], {}, [["EV-1", 3]]),
    ("EV-2_double_store", [CLEAN[0], CLEAN[1], [2.5, [stored(HA[2:], HA[1], A[8:])], None]], {},
     [["EV-2", 3]]),
    ("EV-3_orphan_parent", [CLEAN[0], CLEAN[2], [3.5, [stored(chain([41, 42, 43, 44], HA[2]), HA[2],
                                                               [41, 42, 43, 44])], None]], {}, [["EV-3", 3]]),
    ("EV-4_token_count", [CLEAN[0], [2.0, [stored(HB[2:], HB[1], B[8:] + [35])], None]], {"hash": "none"},
     [["EV-4", 2]]),
    ("EV-5_cleared_then_removed", [CLEAN[0], CLEAN[5], [6.5, [removed([HA[0]])], None]], {}, [["EV-5", 3]]),
    ("EV-6_capacity", [CLEAN[0], CLEAN[1]], {"capacity": 3}, [["EV-6", 2]]),
    ("EV-7_hash_mismatch", [CLEAN[0], [2.0, [stored([HB[2][:-1] + "0" if HB[2][-1] != "0" else HB[2][:-1] + "1"],
                                                    HB[1], B[8:])], None]], {}, [["EV-7", 2]]),
    # object batches numbered by "seq" (a subscriber's log of the publisher's sequence numbers): 2 is lost
    ("EV-8_sequence_gap", [CLEAN[0], CLEAN[1], CLEAN[2]], {"seqs": [0, 1, 3]}, [["EV-8", 3]]),
]


def dump(path: Path, lines) -> None:
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines), encoding="utf-8")


def main() -> None:
    dump(HERE / "vllm_array_sha256.jsonl", CLEAN)
    dump(HERE / "sglang_object_sha256.jsonl", [as_object(b) for b in CLEAN])
    (HERE / "faulty").mkdir(exist_ok=True)
    expect = {}
    for i, (name, batches, opts, want) in enumerate(FAULTS):
        lines = batches if i % 2 == 0 else [as_object(b) for b in batches]
        if "seqs" in opts:
            lines = [{**as_object(b), "seq": seq} for b, seq in zip(batches, opts.pop("seqs"), strict=True)]
        dump(HERE / "faulty" / f"{name}.jsonl", lines)
        expect[f"{name}.jsonl"] = {"options": {"block_size": BS, "hash": "sha256", **opts}, "expect": want}
    (HERE / "faulty" / "expect.json").write_text(json.dumps(expect, indent=2, sort_keys=True) + "\n",
                                                 encoding="utf-8")


if __name__ == "__main__":
    main()
