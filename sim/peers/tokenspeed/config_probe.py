"""Probing the released TokenSpeed scheduler's configuration gate against the cache concepts' configuration clauses
(``kvsim peer tokenspeed --probe-config``; rules TS-GEO-3..7).

The gate is what the bindings answer when handed a configuration: ``CacheGroupConfig.validate()``, ``Scheduler``
and ``CapacityModel`` (seed 002 L319: "SchedulerConfig::Validate() is the single configuration gate"). Each probe
builds one configuration, runs in a process of its own (a gate that aborts instead of raising must not take kvsim
down) and says what the seed expects: accepted or refused. A disagreement is a finding about the wheel. The same
probes, standalone, are ``sim/peers/samples/findings/config_gate.py`` -- the reproducer each finding names.

* TS-GEO-3 (L62 "a snapshot group's block_granularity equals its checkpoint_granularity numerically"; L64 "a
  positive divisor of prefix_granularity ... There is no zero-means-default fallback"; L318): a State group
  declared with block_granularity P or a divisor of P is accepted, one declared with 0 refused.
* TS-GEO-4 (L19 "retention is always full_history"; L341 "the C++ CacheGroupConfig::Validate refuses a sliding State
  group at the bridge"): a State group carrying a sliding window is refused.
* TS-GEO-5 (L64, L318): a history group's block_granularity 0 or a non-divisor of P is refused, a divisor accepted.
* TS-GEO-6 (L319): the gate is explicit and complete -- ``Scheduler()`` without a configuration is refused; the
  CapacityModel refuses the same geometry (its sizing half) yet accepts a configuration without page counts, which
  the Scheduler refuses; a recurrent-state group with a chunk budget below one prefix page is refused ("one-cache-
  block chunks for a recurrent-state group"; the wheel's State group declares no span, so its cache block is read
  as the prefix page its checkpoints fall on).
* TS-GEO-7 (L50 "The identifier page_size must not appear anywhere in tokenspeed-scheduler"; L317 "grep-zero across
  tokenspeed-scheduler (csrc, tests, python bindings)"; L62: checkpoint_granularity, rows_per_page,
  entry_stride_tokens never enter it; L52: no "Paged" cache-group type): the bindings' names and docstrings, and the
  bytes of the installed package's files, hold none of them. csrc and tests are not shipped in the wheel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources

from kvsim.spec.catalogue import stated

__all__ = ["RULES", "PROBES", "Probe", "Outcome", "run_probes", "vocabulary"]

RULES: dict[str, tuple[str, str]] = stated([f"TS-GEO-{i}" for i in range(3, 8)], "probe")  # the catalogue's

_PRELUDE = '''
import json, tokenspeed_scheduler as ts
P = 64
def cfg(groups, tok=8192):
    c = ts.SchedulerConfig()
    c.prefix_granularity, c.cache_groups, c.num_device_pages, c.num_host_pages = P, groups, 40, 0
    c.disable_l2_cache, c.max_batch_size, c.max_scheduled_tokens, c.num_snapshot_pages = True, 8, tok, 1
    return c
def full(bg=P, pages=40):
    return ts.CacheGroupConfig("full", bg, pages, ts.AttnKind.Full)
try:
{body}
    out = {{"accepted": True}}
except Exception as exc:
    out = {{"accepted": False, "error": type(exc).__name__, "message": " ".join(str(exc).split())}}
print(json.dumps(out))
'''


@dataclass(frozen=True)
class Probe:
    name: str
    rule: str
    accept: bool      # what the seed expects of the gate
    clause: str       # the seed line and words
    body: str         # the configuration handed to the gate (Python, indented into the probe process)


PROBES: tuple[Probe, ...] = (
    Probe("state_bg_p", "TS-GEO-3", True, 'L62 "a snapshot group\'s block_granularity equals its '
          'checkpoint_granularity numerically"',
          'ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", P, 40, ts.AttnKind.State)]))'),
    Probe("state_bg_half", "TS-GEO-3", True, 'L64 "a positive divisor of prefix_granularity"',
          'ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", P // 2, 40, ts.AttnKind.State)]))'),
    Probe("state_bg_0", "TS-GEO-3", False, 'L64 "There is no zero-means-default fallback — every group states its '
          'span"', 'ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State)]))'),
    Probe("state_sliding", "TS-GEO-4", False, 'L341 "the C++ CacheGroupConfig::Validate refuses a sliding State '
          'group at the bridge"', 'ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State, 128).validate()'),
    Probe("full_bg_0", "TS-GEO-5", False, 'L318 "every group states its span, with no zero-means-default fallback"',
          "ts.Scheduler(cfg([full(0)]))"),
    Probe("swa_bg_0", "TS-GEO-5", False, 'L318 "every group states its span"',
          'ts.Scheduler(cfg([full(), ts.CacheGroupConfig("swa", 0, 40, ts.AttnKind.SlidingWindow, 128)]))'),
    Probe("full_bg_48", "TS-GEO-5", False, 'L64 "a positive divisor of prefix_granularity, rejected by '
          'SchedulerConfig::Validate()"', "ts.Scheduler(cfg([full(48)]))"),
    Probe("full_bg_32", "TS-GEO-5", True, 'L64 "a positive divisor of prefix_granularity"',
          "ts.Scheduler(cfg([full(32)]))"),
    Probe("state_chunk_below_p", "TS-GEO-6", False, 'L319 "the cross-checks between them (... one-cache-block chunks '
          'for a recurrent-state group)"',
          'ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State)], tok=P // 2))'),
    Probe("scheduler_without_config", "TS-GEO-6", False, 'L319 "Python callers must also pass Scheduler(config) '
          'explicitly; the binding retains no module-lifetime default configuration"', "ts.Scheduler()"),
    Probe("capacity_bad_geometry", "TS-GEO-6", False, 'L319 "the CapacityModel runs that half so a pool can be sized '
          'before it exists"', "ts.CapacityModel(cfg([full(48)]))"),
    Probe("capacity_without_pages", "TS-GEO-6", True, 'L319 "ValidateCapacityInputs(), is the same checks minus the '
          'page counts that describe a sized pool"', "c = cfg([full(P, 0)])\nc.num_device_pages = 0\n"
          "ts.CapacityModel(c)"),
    Probe("scheduler_without_pages", "TS-GEO-6", False, 'L319 "Validate() runs it too" (with the page counts)',
          "c = cfg([full(P, 0)])\nc.num_device_pages = 0\nts.Scheduler(c)"),
)

VOCABULARY = ("page_size", "rows_per_page", "entry_stride_tokens", "checkpoint_granularity")


@dataclass(frozen=True)
class Outcome:
    probe: str
    rule: str
    expected: str             # "accepted" / "refused"
    got: str                  # "accepted" / "refused" / "aborted"
    detail: str               # the gate's error, or how the process ended
    clause: str

    @property
    def agrees(self) -> bool:
        return self.expected == self.got


def _run_one(p: Probe, python: str, env: dict[str, str] | None) -> Outcome:
    body = "\n".join("    " + line for line in p.body.splitlines())
    r = subprocess.run([python, "-c", _PRELUDE.format(body=body)], capture_output=True, text=True, timeout=120,
                       env=env)
    expected = "accepted" if p.accept else "refused"
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return Outcome(p.name, p.rule, expected, "aborted", f"the process ended with status {r.returncode} before "
                       "answering (the gate did not raise a diagnostic)", p.clause)
    got = "accepted" if out["accepted"] else "refused"
    return Outcome(p.name, p.rule, expected, got, f"{out.get('error', '')}: {out.get('message', '')}".strip(": "),
                   p.clause)


def vocabulary(module=None) -> Outcome:
    """TS-GEO-7: the bindings' identifiers and docstrings, and the installed package's bytes (``module``: the
    package to scan, default the installed tokenspeed_scheduler)."""
    import importlib
    import inspect

    ts = module if module is not None else importlib.import_module("tokenspeed_scheduler")
    hits: list[str] = []
    seen: set[int] = set()

    def walk(obj, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        for name in sorted(dir(obj)):
            if name.startswith("__"):
                continue
            where = f"{path}.{name}"
            if any(w in name for w in VOCABULARY) or (inspect.isclass(getattr(obj, name, None)) and "Paged" in name):
                hits.append(f"name {where}")
            v = getattr(obj, name, None)
            doc = getattr(v, "__doc__", None) or ""
            hits.extend(f"docstring of {where}: {w}" for w in VOCABULARY if w in doc)
            if inspect.isclass(v) or inspect.ismodule(v):
                walk(v, where, depth + 1)

    walk(ts, ts.__name__, 0)
    for f in sorted(resources.files(ts).iterdir(), key=lambda t: t.name):
        if f.is_file():
            data = f.read_bytes()
            hits.extend(f"bytes of {f.name}: {w}" for w in VOCABULARY if w.encode() in data)
    return Outcome("bindings_vocabulary", "TS-GEO-7", "absent", "absent" if not hits else "present",
                   "; ".join(hits[:5]) or f"{len(seen)} binding objects and the package files scanned",
                   'L50 "The identifier page_size must not appear anywhere in tokenspeed-scheduler"; L317 "grep-zero '
                   'across tokenspeed-scheduler (csrc, tests, python bindings)"')


def run_probes(python: str | None = None, env: dict[str, str] | None = None, module=None) -> list[Outcome]:
    """Every probe, in order, each in its own process of ``python`` (default: this interpreter; ``env`` its
    environment), then the vocabulary scan of ``module`` (in this process: it only reads names)."""
    exe = python or sys.executable
    return [_run_one(p, exe, env) for p in PROBES] + [vocabulary(module)]
