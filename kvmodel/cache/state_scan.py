"""A NumPy reference of snapshot-state checkpointing in the recurrent prefill (cache concepts L82, L84, L352).

The seed's kernels are not in any plan, but what they must compute is arithmetic a reference can hold: this module
defines it and checks an implementation handed to it (``check_*`` return None when it agrees, else one line).

* Checkpoint selection (L82: "the last internal reusable checkpoint is at floor(after / prefix_granularity) *
  prefix_granularity, strictly between before and after. Its slot is (checkpoint - 1) / block_granularity";
  L84: "At most one internal checkpoint per eligible request is selected"; L352: "select the snapshot at the
  contract's prefix boundary, independently of its state-block span").
* The body/tail split (L84: "Recurrent execution partitions the batch into a body scan and a tail scan when an
  internal checkpoint is needed ... rows crossing a checkpoint stop at that boundary, while other rows run to
  completion ... only crossing rows enter the packed tail scan, initialized directly from their body final states.
  Body and tail outputs are restored to original token order, so every valid token is evaluated exactly once while
  the aligned and final states are both retained"; "Negative token indices make packing write zeros; negative
  inverse sources make gathering write zero output padding").
* Merged capacity graphs (L86: "Merged capacity graphs may reserve a checkpoint/tail execution slot for every request,
  including requests with no internal checkpoint. Such an inactive slot has a negative checkpoint destination and
  output map; its dummy scan result cannot overwrite the body's final state"; "The ordinary compact-tail path and the
  capacity path share masked state writers"): every request gets a tail slot, the inactive ones scan something and
  the masked writers drop what they produce.

The recurrence is a stand-in with the property that matters (order-dependent, state-carrying):
``h_t = decay * h_{t-1} + x_t``, output ``y_t = h_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["DECAY", "select_checkpoint", "snapshot_slot", "scan", "pack", "gather", "split_scan", "write_masked",
           "capacity_scan", "check_selection", "check_snapshot_slots", "check_split_scan", "check_pack_gather",
           "check_capacity_scan"]

DECAY = 0.5


def select_checkpoint(before: int, after: int, p: int) -> int | None:
    """The one internal reusable checkpoint of an extent [before, after), or None (L82)."""
    c = after // p * p
    return c if before < c < after else None


def snapshot_slot(before: int, after: int, p: int, bg: int) -> int | None:
    """The state-group slot the checkpoint is written to: chosen at the prefix boundary (P), addressed by the
    state block span (bg) -- the two need not be equal (L82, L352)."""
    c = select_checkpoint(before, after, p)
    return None if c is None else (c - 1) // bg


def scan(x: np.ndarray, h0: float = 0.0) -> tuple[np.ndarray, float]:
    """The ordinary prefill scan of one request: outputs and final state."""
    y = np.empty(len(x), dtype=np.float64)
    h = h0
    for t, v in enumerate(x):
        h = DECAY * h + float(v)
        y[t] = h
    return y, h


def pack(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Packed inputs ``x[idx]``; a negative index writes zero (it is padding, never x[-1])."""
    idx = np.asarray(idx)
    out = np.zeros(len(idx), dtype=np.float64)
    ok = idx >= 0
    out[ok] = x[idx[ok]]
    return out


def gather(y: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Outputs restored through the inverse map ``y[inv]``; a negative source writes zero output padding."""
    return pack(y, inv)


def split_scan(xs: Sequence[np.ndarray], ckpt: Sequence[int | None],
               h0: Sequence[float] | None = None) -> tuple[list[np.ndarray], list[float | None], list[float]]:
    """The body/tail reference: each request's tokens (relative to its extent) and its checkpoint offset within
    them (None: no internal checkpoint). Returns per request the outputs in token order, the aligned state
    (None without a checkpoint) and the final state."""
    outs: list[np.ndarray] = []
    aligned: list[float | None] = []
    finals: list[float] = []
    for i, x in enumerate(xs):
        start = h0[i] if h0 is not None else 0.0
        c = ckpt[i]
        if c is None:
            y, h = scan(x, start)
            outs.append(y)
            aligned.append(None)
            finals.append(h)
            continue
        yb, hb = scan(x[:c], start)          # the body stops at the boundary
        yt, ht = scan(x[c:], hb)             # the tail starts from the body's final state
        outs.append(np.concatenate([yb, yt]))
        aligned.append(hb)
        finals.append(ht)
    return outs, aligned, finals


def write_masked(buf: np.ndarray, dest: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The masked state writer both paths share (L86): ``buf[dest[i]] = values[i]`` where ``dest[i] >= 0``; a
    negative destination writes nothing (never buf[-1])."""
    out = np.array(buf, dtype=np.float64)
    dest = np.asarray(dest)
    ok = dest >= 0
    out[dest[ok]] = np.asarray(values, dtype=np.float64)[ok]
    return out


def capacity_scan(xs: Sequence[np.ndarray], ckpt: Sequence[int | None],
                  h0: Sequence[float] | None = None) -> tuple[list[np.ndarray], dict[int, float], list[float]]:
    """The merged capacity-graph reference (L86): a body scan for every request (crossing rows stop at their
    checkpoint), then a tail slot for every request. An inactive slot (no internal checkpoint) has checkpoint
    destination and output map -1: its dummy scan (over the request's last token, from its body final state) runs,
    and the masked writers drop its state and outputs. Returns per request the outputs in token order, the
    checkpoint states written (request -> aligned state; inactive requests absent) and the continuation (final)
    states the writers leave."""
    n = len(xs)
    start = list(h0) if h0 is not None else [0.0] * n
    outs: list[np.ndarray] = []
    body_final = np.zeros(n)
    for i, x in enumerate(xs):
        c = ckpt[i]
        y, body_final[i] = scan(x if c is None else x[:c], start[i])
        outs.append(np.concatenate([y, np.zeros(len(x) - len(y))]))
    finals = write_masked(np.zeros(n), np.arange(n), body_final)  # the body writes every row's state
    tail_final = np.zeros(n)
    ckpt_dest = np.full(n, -1)
    for i, x in enumerate(xs):
        c = ckpt[i]
        if c is None:  # inactive: a dummy scan whose result must go nowhere
            _y, tail_final[i] = scan(x[-1:] if len(x) else np.zeros(1), body_final[i])
            continue
        y, tail_final[i] = scan(x[c:], body_final[i])
        outs[i][c:] = gather(y, np.arange(len(x) - c))
        ckpt_dest[i] = i
    out_dest = np.where(ckpt_dest >= 0, np.arange(n), -1)  # the inactive slot's output map is negative too
    checkpoints = write_masked(np.zeros(n), ckpt_dest, body_final)
    finals = write_masked(finals, out_dest, tail_final)
    return outs, {i: float(checkpoints[i]) for i in range(n) if ckpt_dest[i] >= 0}, [float(h) for h in finals]


def check_selection(select: Callable[[int, int, int], Sequence[int]],
                    cases: Sequence[tuple[int, int, int]]) -> str | None:
    """An implementation's checkpoint choice per extent (a list of positions it materializes) against L82/L84: at
    most one, and exactly the reference's."""
    for before, after, p in cases:
        got = list(select(before, after, p))
        want = select_checkpoint(before, after, p)
        if len(got) > 1:
            return f"[{before}, {after}) P={p}: {len(got)} internal checkpoints selected {got}; at most one per request"
        if (got[0] if got else None) != want:
            return f"[{before}, {after}) P={p}: checkpoint {got[0] if got else None}, the reference selects {want}"
    return None


def check_snapshot_slots(slot: Callable[[int, int, int, int], int | None],
                         cases: Sequence[tuple[int, int, int, int]]) -> str | None:
    """An implementation's snapshot slot per (before, after, P, bg) against the reference (selected at P, addressed
    by bg)."""
    for before, after, p, bg in cases:
        got, want = slot(before, after, p, bg), snapshot_slot(before, after, p, bg)
        if got != want:
            return (f"[{before}, {after}) P={p} block_granularity={bg}: slot {got}, the prefix-boundary snapshot is "
                    f"slot {want}")
    return None


def check_split_scan(impl: Callable, xs: Sequence[np.ndarray], ckpt: Sequence[int | None]) -> str | None:
    """An implementation of the body/tail split (same signature as ``split_scan``) against the ordinary scan:
    every token evaluated exactly once (outputs equal the unsplit scan's), the aligned state the unsplit state
    at the checkpoint, the final state the unsplit final state."""
    outs, aligned, finals = impl(xs, ckpt)
    for i, x in enumerate(xs):
        y, h = scan(x)
        if len(outs[i]) != len(x) or not np.allclose(outs[i], y):
            return f"request {i}: outputs differ from the ordinary scan (a token evaluated twice, lost or out of order)"
        c = ckpt[i]
        if c is not None:
            _, hc = scan(x[:c])
            if aligned[i] is None or not np.isclose(aligned[i], hc):
                return f"request {i}: the aligned state at {c} is not retained ({aligned[i]} != {hc})"
        if not np.isclose(finals[i], h):
            return f"request {i}: final state {finals[i]} != {h}"
    return None


def check_pack_gather(pack_impl: Callable, gather_impl: Callable, x: np.ndarray, idx: np.ndarray) -> str | None:
    """Packing and gathering with negative indices (padding) must write zeros, never wrap to the last element."""
    for name, impl in (("pack", pack_impl), ("gather", gather_impl)):
        got, want = np.asarray(impl(x, idx)), pack(x, idx)
        if got.shape != want.shape:
            return f"{name}: {got.shape} values for {len(idx)} indices"
        if not np.allclose(got, want):
            bad = int(np.flatnonzero(~np.isclose(got, want))[0])
            return f"{name}: entry {bad} (index {int(idx[bad])}) is {got[bad]}, the reference writes {want[bad]}"
    return None


def check_capacity_scan(impl: Callable, xs: Sequence[np.ndarray], ckpt: Sequence[int | None]) -> str | None:
    """An implementation of the capacity path (same signature as ``capacity_scan``) against the ordinary scan: every
    request's continuation state is its unsplit final state -- for a request with no internal checkpoint, the body's,
    whatever its inactive slot's dummy scan computed (L86) -- its outputs the unsplit outputs, and a checkpoint is
    written for exactly the requests that have one, holding the unsplit state there."""
    outs, written, finals = impl(xs, ckpt)
    for i, x in enumerate(xs):
        y, h = scan(x)
        c = ckpt[i]
        if not np.isclose(finals[i], h):
            what = "the inactive slot's dummy scan overwrote the body's final state" if c is None else "final state"
            return f"request {i}: {what} ({finals[i]} != {h})"
        if len(outs[i]) != len(x) or not np.allclose(outs[i], y):
            return f"request {i}: outputs differ from the ordinary scan"
        if c is None and i in written:
            return f"request {i}: no internal checkpoint, yet its inactive slot wrote checkpoint state {written[i]}"
        if c is not None:
            _, hc = scan(x[:c])
            if i not in written or not np.isclose(written[i], hc):
                return f"request {i}: the checkpoint at {c} holds {written.get(i)}, not {hc}"
    return None
