"""What PEER-11's crash classification must say about one exception, written from its documented behaviour alone
(spec: sim/peers/judges/engine_rules.py DECISIONS["PEER-11"]; the drivers' docstrings): the reference the
`judge-crash` machine holds the drivers' ``crash_facts`` and the engine judge's finding to.

An exception raised while the engine steps is the engine's (a PEER-11 finding, ``{"crash": ...}``) when its
traceback has a frame inside the engine's package -- a file under ``PACKAGE/`` (a sibling folder whose name merely
starts with the package's is another package); the finding names the innermost such frame as
``PATH:LINE in FUNCTION`` with PATH relative to the folder holding the package (site-packages). An exception
raised in the driver script's own code (its innermost frame is the driver file; for SGLang, any script of the
driver's folder: its hybrid parts unified.py and hybrid.py, its ledger) is kvsim's own bug (``{"bug":
...}``, exit 3), whatever called it -- except SGLang's ``EngineFault``, an engine answer the driver cannot go on
from, which names the driver's frame, ``DRIVER.py:LINE in FUNCTION (the driver found it)``. One before the first
step (no step, the setup phase) is a setup the engine refused (``{"error": ...}``, exit 2). The request: vLLM's
innermost engine frame's ``request`` local that carries a string ``request_id`` (when that id is not empty), else
the one the driver was handling; SGLang's, the driver's. The message is the exception's text with runs of white
space made one space, at most 300 characters; the traceback its last six frames, engine frames relative to
site-packages and any other by its file's base name.

A frame is described as a dict: ``file`` (absolute path), ``func``, ``line`` and ``request`` (None, or the
``request_id`` its ``request`` local carries: a str, or anything else for a local that carries none usable),
``block`` (vLLM) and ``node`` (SGLang): None, or what that frame's ``block`` local carries as ``block_id``, its
``node`` local as ``id``. The subject the crash was handling: vLLM's innermost engine frame (from the innermost
out) whose ``block`` carries an int ``block_id >= 0``; SGLang's innermost engine frame's ``node`` when its ``id``
is an int (no outer frame is asked). Imports nothing of kvsim.
"""

from __future__ import annotations

import os

__all__ = ["expected", "classify"]


def _inside(path: str, package: str) -> bool:
    return path.startswith(package + os.sep)


def expected(engine: str, frames: list[dict], type_name: str, text: str, package: str, driver: str,
             where: dict, engine_fault: bool = False) -> dict:
    """The facts the driver reports for an exception whose traceback runs through ``frames`` (outermost first)."""
    root = os.path.dirname(package)
    inner = [f for f in reversed(frames) if _inside(f["file"], package)]
    frame = f"{os.path.relpath(inner[0]['file'], root)}:{inner[0]['line']} in {inner[0]['func']}" if inner else None
    last = frames[-1]
    here, script = os.path.abspath(last["file"]), os.path.abspath(driver)
    own = here == script or (engine == "sglang" and os.path.dirname(here) == os.path.dirname(script))
    if engine == "sglang" and engine_fault:
        frame = f"{os.path.basename(driver)}:{last['line']} in {last['func']} (the driver found it)"
    elif own:
        frame = None
    request = where.get("request")
    if engine == "vllm":
        named = [f["request"] for f in inner if isinstance(f["request"], str)]
        if named:  # the innermost one; an empty id names nobody
            request = named[0] or request
    tail = [f"{os.path.relpath(f['file'], root) if _inside(f['file'], package) else os.path.basename(f['file'])}"
            f":{f['line']} in {f['func']}" for f in frames[-6:]]
    facts = {"type": type_name, "message": " ".join(text.split())[:300], "frame": frame, "step": where.get("step"),
             "request": request, "phase": where.get("phase"), "traceback": tail}
    if engine == "vllm":
        held = [f.get("block") for f in inner if isinstance(f.get("block"), int)]
        facts["block"] = next((b for b in held if b >= 0), None)
    else:
        node = inner[0].get("node") if inner else None
        facts["node"] = node if isinstance(node, int) else None
    return facts


def classify(facts: dict, where: dict) -> str:
    """``crash`` (PEER-11), ``bug`` (kvsim's driver failed: exit 3) or ``error`` (the engine refused its setup)."""
    if where.get("step") is None and where.get("phase") == "setup":
        return "error"
    return "crash" if facts["frame"] else "bug"
