"""Naming a workload on the command line: a file (Mooncake ``.jsonl`` or Azure ``.csv``), a bundled excerpt,
or the seeded synthetic generator.

``WORKLOAD`` is one of: a path ending in ``.jsonl`` (Mooncake) or ``.csv`` (Azure); ``excerpt:NAME`` for a
file shipped in ``sim/workloads/excerpts`` (``conversation``, ``synthetic``, ``azure-conv``, ``azure-code``);
``synthetic`` or ``synthetic:SEED`` for the generator; ``synthetic:prefix-stress[:SEED]`` for the
prefix-cache stress generator (``sim.workloads.prefix_stress``), ``synthetic:hybrid-stress[:SEED]`` for the hybrid
and tiered cache one (``sim.workloads.hybrid_stress``). A file whose name does not say its format -- ``-``
(standard input), ``/dev/stdin``, a process substitution -- needs it given (``fmt``: ``mooncake`` or
``azure``); the file is read once, as a stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import cast

from kvsim.sim.files import STDIN
from kvsim.sim.workloads import hybrid_stress
from kvsim.sim.workloads.azure import iter_azure
from kvsim.sim.workloads.mooncake import iter_mooncake
from kvsim.sim.workloads.prefix_stress import DEFAULT_REQUESTS as DEFAULT_STRESS_REQUESTS
from kvsim.sim.workloads.prefix_stress import iter_prefix_stress
from kvsim.sim.workloads.request import Request, WorkloadInputError
from kvsim.sim.workloads.synthetic import iter_synthetic

EXCERPTS = {"conversation": "mooncake_conversation_500.jsonl", "synthetic": "mooncake_synthetic_500.jsonl",
            "azure-conv": "azure_conv_500.csv", "azure-code": "azure_code_500.csv"}


def shared_workloads() -> Path | None:
    """The folder of full workload files kept beside the repository (``../shared/workloads`` of the
    checkout, or of the folder above it), or KVSIM_WORKLOADS; None when there is none."""
    env = os.environ.get("KVSIM_WORKLOADS")
    repo = Path(__file__).resolve().parents[2]
    for folder in ([Path(env)] if env else []) + [repo.parent / "shared" / "workloads",
                                                    repo.parent.parent / "shared" / "workloads"]:
        if folder.is_dir():
            return folder
    return None


def excerpt_path(name: str) -> Path:
    """The bundled excerpt file for `name` (package data of kvsim.sim.workloads)."""
    return Path(str(resources.files("kvsim.sim.workloads") / "excerpts" / EXCERPTS[name]))


FORMATS = ("mooncake", "azure")


def resolve(spec: str, fmt: str | None = None) -> tuple[str, object]:
    """(kind, argument): ("mooncake", path) | ("azure", path) | ("synthetic", seed) | ("synthetic",
    ("prefix-stress", seed)); bad names raise. ``fmt`` (mooncake | azure) names the format of a file whose name
    does not say it."""
    stress = stress_spec(spec)
    if stress is not None:
        return "synthetic", stress
    if spec == "synthetic" or spec.startswith("synthetic:"):
        seed = spec.partition(":")[2] or "0"
        if not seed.isdigit():
            raise WorkloadInputError(spec, 0, "synthetic:SEED needs a non-negative integer seed")
        return "synthetic", int(seed)
    if spec.startswith("excerpt:"):
        name = spec.partition(":")[2]
        if name not in EXCERPTS:
            raise WorkloadInputError(spec, 0, f"unknown excerpt {name!r}; expected one of {', '.join(EXCERPTS)}")
        path = excerpt_path(name)
    else:
        path = Path(spec)
    if fmt is not None:
        if fmt not in FORMATS:
            raise WorkloadInputError(spec, 0, f"unknown workload format {fmt!r}: expected mooncake or azure")
        return fmt, str(path)
    if path.suffix == ".jsonl":
        return "mooncake", str(path)
    if path.suffix == ".csv":
        return "azure", str(path)
    raise WorkloadFormatError(spec, 0, "reading a workload from standard input needs --format mooncake|azure"
                              if spec == STDIN else "cannot tell the workload's format from its name (a .jsonl "
                              "Mooncake or .csv Azure file, excerpt:NAME, synthetic[:SEED] or "
                              "synthetic:prefix-stress[:SEED], synthetic:hybrid-stress[:SEED]): pass --format "
                              "mooncake|azure")


STRESS = "prefix-stress"


STRESS_DEFAULTS = {STRESS: DEFAULT_STRESS_REQUESTS, hybrid_stress.NAME: hybrid_stress.DEFAULT_REQUESTS}


def stress_spec(spec: str) -> tuple[str, int] | None:
    """(generator, seed) of ``synthetic:prefix-stress[:SEED]`` or ``synthetic:hybrid-stress[:SEED]`` (seed 0 when
    omitted); None for any other name. A bad seed raises WorkloadInputError."""
    for name in STRESS_DEFAULTS:
        head = f"synthetic:{name}"
        if spec != head and not spec.startswith(head + ":"):
            continue
        seed = spec[len(head) + 1:] or "0"
        if not seed.isdigit():
            raise WorkloadInputError(spec, 0, f"synthetic:{name}:SEED needs a non-negative integer seed")
        return name, int(seed)
    return None


def prefix_stress_seed(spec: str) -> int | None:
    """The seed of ``synthetic:prefix-stress[:SEED]`` (0 when omitted); None for any other name."""
    stress = stress_spec(spec)
    return stress[1] if stress is not None and stress[0] == STRESS else None


def default_requests(spec: str) -> int:
    """How many requests a generator yields when no count is given."""
    stress = stress_spec(spec)
    return STRESS_DEFAULTS[stress[0]] if stress is not None else 1000


AZURE_NOTE = ("Azure LLM inference traces carry no prefix data (arrival times and token counts only): every prompt "
              "block gets a fresh id, so the prefix hit ratio is 0 by construction; such a trace measures arrival "
              "and length mixes and capacity pressure, not reuse")


def workload_notes(spec: str, fmt: str | None = None) -> list[str]:
    """What a report must say about the workload itself (a trace without prefix data)."""
    kind, _ = resolve(spec, fmt)
    return [AZURE_NOTE] if kind == "azure" else []


class WorkloadFormatError(WorkloadInputError):
    """A workload file whose format is neither given nor told by its name."""


def open_workload(spec: str, requests: int | None = None, fmt: str | None = None, stream=None) \
        -> Iterator[Request]:
    """The requests of a workload in arrival order, streamed (at most `requests`). ``stream``: the file
    already opened (a `sim.files.Source`, read once), which ``spec`` names."""
    kind, arg = resolve(spec, fmt)
    if kind == "mooncake":
        return iter_mooncake(arg, requests, stream)
    if kind == "azure":
        return iter_azure(arg, requests, stream)
    if isinstance(arg, tuple):
        if arg[0] == hybrid_stress.NAME:
            return hybrid_stress.iter_hybrid_stress(requests, seed=arg[1])
        return iter_prefix_stress(requests, seed=arg[1])
    return iter_synthetic(1000 if requests is None else requests, seed=cast(int, arg))
