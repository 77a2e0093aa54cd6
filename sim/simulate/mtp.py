"""Speculative decode rounds under the MTP backend: each decoding lane verifies K positions per unit and
commits only the accepted ones, in the Main and the MTP pool.

Store contract: "MTP with draft window K" (the MTP pool: "MTP physical pages = M + C * ceil((K - 1) / P)",
its extra pages "只覆盖每条 active row 在一个 speculative round 中相对 Main 的 provisional lead"), "一次
speculative unit 中，Main 与 backend：分别从各自 active reservation materialize；可以具有不同
mapped/provisional frontiers；分别提交 accepted frontier；分别 trim rejected trailing mappings" and "MTP
draft 期间 backend mapped extent可以暂时领先 Main ... Rejected bytes 可以留在 partial page 中，但后续读取前
必须被新的 canonical write 覆盖".

One round of a lane at committed frontier F that ends at E (prompt + output), with w = min(K, E - F):

* Main: the target's verify maps up to F + w and writes [F, F + w) (the verified token and w - 1 drafts).
* MTP: the draft head writes its K/V for the same positions and, while the request goes on after this
  round, drafts the next round's K - 1 positions beyond them: it maps and writes [F, F + w + K - 1)
  (capped at S). That lead is what the MTP pool's extra pages cover (the model bills the MTP address space
  at most ceil((K - 1)/P) pages beyond Main's entitlement).
* The unit commits the accepted frontier F + a in both pools, 1 <= a <= w: the verified token always,
  then each draft token while the drafts are accepted.

Rejected positions stay mapped and are not trimmed: the next round's window starts at F + a and always
covers them again (F + a + min(K, E - F - a) >= F + w), so a trim would be undone at once (trailing
mappings *may* be unmapped; ensure_mapped is a lower bound), and the lane's finish releases them. The next
write starts at the committed frontier, so rejected bytes are overwritten before anything reads them.

Acceptance is a seeded, deterministic draw per (request, round): a splitmix64 stream keyed by the seed, the
request id and the round's frontier (unique per round of a lane); each of the w - 1 draft tokens is accepted
with probability `accept_rate` until the first rejection. No unseeded randomness: the same workload and
options give the same rounds.
This module knows the lanes' frontiers and the kvtrace/1 vocabulary, not the model's internals.
"""

from __future__ import annotations

from kvsim.sim.trace import records as kt

P = 64
MAIN: kt.Pool = "main"
MTP: kt.Pool = "mtp"
_MASK = (1 << 64) - 1
_UNIT = 2.0 ** -53


def _mix(x: int) -> int:
    """splitmix64 step on a Python int: the next well-mixed 64-bit value of the stream."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class SpeculativeRounds:
    """The speculative decode rounds of one simulation: rows and commits per lane, acceptance, statistics."""

    def __init__(self, config) -> None:
        k = config.draft_window
        if k < 1:
            raise ValueError(f"the MTP draft window must be at least 1, got {k}")
        if not 0.0 <= config.accept_rate <= 1.0:
            raise ValueError(f"the acceptance rate must lie in [0, 1], got {config.accept_rate}")
        self.k = k
        self.rate = config.accept_rate
        self.max_context = config.max_context
        self.key = _mix(config.seed & _MASK)
        self.mtp_mapped: dict[str, int] = {}  # seq -> MTP pages mapped (Main's count until its first round)
        self.pending: list = []  # (lane, accepted) of the unit being built
        self.last_tokens = 0
        self.rounds = self.drafts = self.accepted_drafts = 0

    def accepted(self, rid: int, frontier: int, w: int) -> int:
        """Tokens the round at `frontier` commits out of `w` verified positions (at least 1)."""
        x = _mix(self.key ^ _mix((rid & _MASK) ^ _mix(frontier)))
        a = 1
        rate = self.rate
        while a < w:
            x = _mix(x)
            if (x >> 11) * _UNIT >= rate:
                break
            a += 1
        return a

    def round(self, lanes: dict, emit, rows: list, commits: list) -> None:
        """Append every decoding lane's rows and commits to the unit being built (mapping ahead first)."""
        k, s_max, mtp_mapped = self.k, self.max_context, self.mtp_mapped
        pending = self.pending = []
        row, commit = kt.LaunchRow, kt.CommitRow
        for lane in lanes.values():
            seq, f, end = lane.seq, lane.frontier, lane.end
            w = min(k, end - f)
            a = self.accepted(lane.rid, f, w)
            mm = mtp_mapped.get(seq, lane.mapped)  # a decode lane starts with equal extents in both pools
            b = f + w
            need = -(-b // P)
            if need > lane.mapped:
                emit(kt.Map(seq=seq, pool=MAIN, tokens=b))
                lane.mapped = need
            mb = min(b + k - 1, s_max) if f + a < end else b  # the next round's drafts lead Main
            need = -(-mb // P)
            if need > mm:
                emit(kt.Map(seq=seq, pool=MTP, tokens=mb))
                mm = need
            mtp_mapped[seq] = mm
            rows.append(row(seq, MAIN, (f, b)))
            rows.append(row(seq, MTP, (f, mb)))
            commits.append(commit(seq, MAIN, f + a))
            commits.append(commit(seq, MTP, f + a))
            pending.append((lane, a))
            self.drafts += w - 1
            self.accepted_drafts += a - 1
        self.rounds += len(pending)

    def advance(self, lanes: dict) -> list:
        """After the unit completed: advance each lane by its accepted tokens; returns the lanes that are done."""
        done = []
        tokens = 0
        for lane, a in self.pending:
            lane.frontier += a
            tokens += a
            if lane.frontier >= lane.end:
                done.append(lane)
                self.mtp_mapped.pop(lane.seq, None)
        self.pending = []
        self.last_tokens = tokens
        return done

    def stats(self) -> dict:
        rounds, drafts, accepted = self.rounds, self.drafts, self.accepted_drafts
        return {"spec_rounds": rounds, "draft_tokens": drafts, "accepted_draft_tokens": accepted,
                "acceptance": round(accepted / drafts, 6) if drafts else 0.0,
                "tokens_per_round": round((rounds + accepted) / rounds, 6) if rounds else 0.0}
