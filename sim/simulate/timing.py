"""The simulation's timing model: how long one engine iteration takes in virtual seconds, and where it comes from.

One iteration (one GPU unit: a prefill chunk and one decode token per decoding lane) takes

    base + prefill_token · (prompt tokens in the chunk) + decode_lane · (decoding lanes)
         + (Host bytes offloaded or restored since the last iteration) / host_link_bytes_per_s

Host copies are charged to the iteration that follows them and never overlap compute (a pessimistic model:
a real engine overlaps part of them). Every latency figure of a simulation is a consequence of this model
and of nothing else: the figures are only as good as the model, and a user with measured step times of
their own engine replaces it (`--timing FILE`, JSON, or YAML when PyYAML is installed).

Defaults, argued from public figures for one H100/H200-class GPU (989 dense bf16 TFLOPS, 3.35 TB/s HBM3 on
H100 SXM, 4.8 TB/s HBM3e on H200, PCIe 5.0 x16 to the host) serving a mid-size model whose KV cache is the
simulation's default geometry (16 full-attention layers, 4 KV heads, head_dim 256: 64 KiB per token in bf16):

* ``base_s`` = 8 ms: the fixed cost of one forward pass — reading the weights once (about 30 GB of bf16
  weights at 4.8 TB/s is 6.3 ms) plus kernel launches and scheduling; public vLLM/SGLang serving benchmarks
  report 7–15 ms inter-token latency for 8B–30B models at small batch on these GPUs.
* ``prefill_token_s`` = 20 µs: 50,000 prefill tokens/s, about 2·N FLOPs per token for N ≈ 4–5 B active
  parameters at 40–50 % of 989 TFLOPS.
* ``decode_lane_s`` = 0.1 ms: the marginal cost of one more sequence in a decode batch, dominated by reading
  its KV — a 7,000-token context at 64 KiB/token is 0.46 GB, 0.1 ms at 4.8 TB/s.
* ``host_link_bytes_per_s`` = 50 GB/s: what pinned-memory copies reach on PCIe 5.0 x16 (64 GB/s raw per
  direction); a Grace-Hopper NVLink-C2C link is about 9x faster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Timing:
    """Virtual seconds per engine iteration (see the module docstring for the formula and the defaults)."""
    base_s: float = 0.008
    prefill_token_s: float = 2.0e-5
    decode_lane_s: float = 1.0e-4
    host_link_bytes_per_s: float = 50.0e9

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
                raise ValueError(f"{f.name}: expected a finite non-negative number, got {v!r}")
        if self.host_link_bytes_per_s <= 0:
            raise ValueError(f"host_link_bytes_per_s: expected a positive bandwidth, got "
                             f"{self.host_link_bytes_per_s!r}")

    def iteration(self, chunk: int, lanes: int, host_bytes: int) -> float:
        """Seconds one iteration takes: `chunk` prefill tokens, `lanes` decoding lanes, `host_bytes` copied."""
        return (self.base_s + chunk * self.prefill_token_s + lanes * self.decode_lane_s
                + host_bytes / self.host_link_bytes_per_s)


TIMING_KEYS = tuple(f.name for f in fields(Timing))


def _number(v: object) -> object:
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


class TimingFileError(ValueError):
    """A timing file that cannot be used: ``str()`` is one line ``"<path>:<line>: <reason>"``."""


def load_timing(path: str) -> Timing:
    """A Timing from a JSON (or, with PyYAML installed, YAML) mapping of some of TIMING_KEYS; the keys left
    out keep their defaults. Unknown keys, non-numbers and negative values are errors."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TimingFileError(f"{path}:0: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise TimingFileError(f"{path}:0: a YAML timing file needs PyYAML (pip install pyyaml); "
                                  "or give the same keys as JSON") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 0
            raise TimingFileError(f"{path}:{line}: not YAML: {getattr(exc, 'problem', None) or exc}") from None
        if isinstance(doc, dict):  # YAML 1.1 reads 4.5e11 (no dot, no exponent sign) as a string
            doc = {k: _number(v) for k, v in doc.items()}
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TimingFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise TimingFileError(f"{path}:1: expected a mapping of {', '.join(TIMING_KEYS)}")
    unknown = sorted(str(k) for k in doc if k not in TIMING_KEYS)
    if unknown:
        raise TimingFileError(f"{path}:1: unknown key {unknown[0]!r}; expected some of {', '.join(TIMING_KEYS)}")
    try:
        return Timing(**doc)
    except ValueError as exc:
        raise TimingFileError(f"{path}:1: {exc}") from None
