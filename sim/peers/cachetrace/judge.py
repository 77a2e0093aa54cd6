"""Judging a recorded cachetrace/1 file: every record through the observable contract, every ``kv`` batch
through the KV-event checks. A record the judge cannot apply (a plan naming a request never submitted, a
result out of order) is an input error at its line. Knows records, not schedulers."""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.trace import cachetrace as ct

__all__ = ["Judged", "folds_groups", "judge_cachetrace", "merge_cachetraces"]


def folds_groups(config: ct.Config) -> bool:
    """Whether the scheduler's KV events fold a published non-prefix-closed group (sliding-window or state, not
    replayable: replayable groups "skip publication", seed 002 L185) into each prefix event (L193): then a
    store under a parent the stream does not hold is the fold's designed orphan (EV-3's entry)."""
    return any(g.attn_kind != "full" and not g.replayable for g in config.groups)


@dataclass
class Judged:
    header: ct.Header
    contract: Contract
    events: EventChecker
    lines: int


def judge_cachetrace(path, stream=None) -> Judged:
    """Raises ``ct.CacheTraceInputError`` (one line ``path:line: reason``) on malformed input. ``stream``: the
    input already opened (read once, from where it stands), which ``path`` names."""
    header, lines = ct.read_cachetrace(path, stream)
    cfg = header.config
    contract = Contract(cfg)
    # a TokenSpeed record's events carry the wheel's FNV-1a 64 chain (seed 002 L309): EV-7 recomputes them;
    # another scheduler's scheme is recognised from its first root block
    scheme = "fnv1a64" if cfg.scheduler.startswith("tokenspeed") else "auto"
    events = EventChecker(block_size=cfg.prefix_granularity, hash_scheme=scheme, capacity=cfg.num_device_pages - 1,
                          partial_tails=True, folded_groups=folds_groups(cfg))
    n = 1
    for n, rec in lines:
        try:
            if isinstance(rec, ct.KvEvents):
                events.batch(rec.events, n)
                contract.kv(rec, n)
            else:
                contract.apply(rec, n)
        except (ValueError, KeyError, IndexError) as exc:
            raise ct.CacheTraceInputError(path, n, f"cannot apply {type(rec).__name__.lower()}: {exc}") from None
    contract.finish(n)
    return Judged(header, contract, events, n)


def merge_cachetraces(report: dict, inputs: list) -> dict:
    """Judge each cachetrace/1 input -- a path, or (name, opened `sim.files.Source`) read once, its SHA-256
    taken in the same pass -- and add it to a kvreport/1 dict built for the kvtrace/1 inputs: its input
    entry, violations, rule counters (rules the catalogue does not know are added) and its stats under
    ``stats.cachetraces``."""
    from kvsim.sim.files import open_source
    from kvsim.sim.peers.report import build

    for item in inputs:
        if isinstance(item, tuple):
            path, src = item
        else:
            try:
                src = open_source(item)
            except OSError as exc:
                raise ct.CacheTraceInputError(str(item), 0, f"cannot read: {exc.strerror or exc}") from None
            path = src.name
        j = judge_cachetrace(path, src)
        one = build([{"path": path, "sha256": src.sha256(), "events": j.lines - 1}], path, j.contract,
                    j.events)
        report["inputs"].append(one["inputs"][0])
        report["violations"] += one["violations"]
        if "hazards" in one:  # EV-3's fold orphans: one hazard, consequences counted apart (never violations)
            report.setdefault("hazards", []).extend(one["hazards"])
        if "hazards" in one or one.get("consequences"):  # the orphans; what follows from a root (causes)
            report.setdefault("consequences", []).extend(one["consequences"])
            stats = report.setdefault("stats", {})
            stats["consequences"] = stats.get("consequences", 0) + one["stats"]["consequences"]
        for rid, c in one["rules"].items():
            acc = report["rules"].setdefault(rid, {k: v for k, v in c.items() if k != "consequences"} |
                                             {"checked": 0, "exercised": 0, "violated": 0})
            for k in ("checked", "exercised", "violated", "consequences"):
                if k in c:
                    acc[k] = acc.get(k, 0) + c[k]
        report.setdefault("stats", {}).setdefault("cachetraces", {})[path] = one["stats"]
        if one["verdict"] == "fail":
            report["verdict"] = "fail"
    return report
