"""The `capacity` machine: the store model's capacity resolution (``kvmodel.store.resolve_capacity``: the explicit
and automatic policies, the backend pools) against ``sim.fuzz.capacity_reference``, the store contract's formulas.

Hypothesis draws the geometry (max_context, concurrency, profile, heads, layers, backend, reserved bytes) and the
policy: explicit capacities at and around the contract's edges (S - 1, S, M_min·P - 1, M_min·P, M_max·P,
M_max·P + 1, any), automatic free and headroom bytes placing F - R at, one byte under or one byte over B(M) for M
at M_min, M_min + 1, M_max, beyond M_max or anywhere, and no policy. A configuration the model refuses must be one
the contract refuses (CAP-1), and one it resolves must have the contract's M and pool sizes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz import capacity_reference as ref
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN, declare, reached

declare([f"capacity:{p}:{o}" for p in ("explicit", "automatic") for o in ("refused", "at-min", "between", "at-max")]
        + ["capacity:none:at-max"] + [f"capacity:pools:{b}" for b in ("off", "mtp", "dflash", "dflash2")])


class CapacityMachine(RuleBasedStateMachine):
    name = "capacity"
    oracles = ("capacity",)  # branches: each policy refused and resolved at M_min, between and at M_max

    @staticmethod
    def catalogue_ids() -> list[str]:
        return []

    def __init__(self) -> None:
        super().__init__()
        self.failed = False
        self.header: dict = {}

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize()
    def start(self) -> None:
        RUN.examples += 1

    @rule(s=st.integers(1, 40), c=st.integers(1, 9), profile=st.sampled_from(("bf16", "int8", "fp8", "nvfp4", "k8v4")),
          heads=st.integers(1, 4), layers=st.integers(1, 3),
          backend=st.sampled_from(("off", "mtp", "dflash", "dflash2")),
          window=st.sampled_from((1, 2, 3, 65, 130)), reserved=st.sampled_from((0, 0, 1, 4096, 12345)),
          policy=st.sampled_from(("explicit", "automatic", "automatic", "none")), edge=st.integers(0, 6),
          at=st.integers(0, 5), delta=st.sampled_from((-1, 0, 1, 0)), data=st.data())
    def config(self, s, c, profile, heads, layers, backend, window, reserved, policy, edge, at, delta, data) -> None:
        from kvsim.kvmodel.store import ConfigError, resolve_capacity
        from kvsim.kvmodel.store.capacity import build_layout
        from kvsim.sim.trace import records as kt
        from kvsim.sim.trace.config import store_config
        S = s * 32 + data.draw(st.integers(0, 31))
        lo, hi = ref.m_range(S, c)
        b: Any = {"off": kt.BackendOff(), "mtp": kt.BackendMTP(draft_window=window),
                  "dflash": kt.BackendDFlash(full_layers=1, kv_heads=1, head_dim=128),
                  "dflash2": kt.BackendDFlash2()}[backend]
        base = dict(max_context=S, max_concurrency=c, page_size=64, kv_profile=profile, backend=b,
                    model=kt.Model(full_attention_layers=layers, kv_heads=heads, head_dim=256), reserved_bytes=reserved)
        probe = store_config(kt.Config(**base, kv_capacity=kt.KVCapacity(tokens=hi * 64)))

        def b_of(m: int) -> int:
            return build_layout(probe, m).reservation_bytes
        cap: Any = None
        tokens = free = headroom = 0
        if policy == "explicit":
            tokens = max(1, (S - 1, S, lo * 64 - 1, lo * 64, hi * 64, hi * 64 + 1,
                             data.draw(st.integers(1, hi * 64 + 64)))[edge])
            cap = kt.KVCapacity(tokens=tokens)
        elif policy == "automatic":
            m = (lo, lo + 1, hi, hi + 3, data.draw(st.integers(lo, hi)), lo, hi)[edge]
            headroom = (0, 1, 1 << 20, 77, 4096, 0)[at]
            free = max(0, b_of(m) + headroom + delta)
            cap = kt.KVCapacity(auto=kt.AutoCapacity(free_bytes=free, headroom_bytes=headroom))
        cfg = kt.Config(**base, kv_capacity=cap)
        self.header = {"config": json.loads(json.dumps(cfg, default=lambda o: {f: getattr(o, f) for f in
                                                                              o.__struct_fields__}))}
        want = ref.resolve(S, c, policy, tokens, free, headroom, b_of)
        try:
            got = resolve_capacity(store_config(cfg))
        except ConfigError as exc:
            if want is not None:
                self.fail("refused", f"{policy}: the model refuses ({exc.rule}: {exc}); the contract resolves "
                          f"M = {want}")
            self.count(f"refused:{policy}")
            reached(f"capacity:{policy}:refused")
            return
        if want is None:
            self.fail("accepted", f"{policy}: the model resolves M = {got.m}; the contract refuses it")
        pools = ref.pools(want, c, backend, window, getattr(b, "full_layers", 0))
        if got.m != want or got.pages != pools:
            self.fail("resolved", f"{policy}: the model resolves M = {got.m}, pools {got.pages}; the contract: "
                      f"M = {want}, pools {pools}")
        where = "at-max" if want == hi else "at-min" if want == lo else "between"
        self.count(f"resolved:{policy}:{where}")
        reached(f"capacity:{policy}:{where}")
        reached(f"capacity:pools:{backend}")

    def fail(self, kind: str, message: str) -> NoReturn:
        self.failed = True
        text = f"CAP-1 ({kind}) {message}"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = (json.dumps(self.header, sort_keys=True) + "\n").encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": "CAP-1", "reproduced": True,
                                "trace": str(path), "steps": 1, "replay": message}
        raise FuzzFailure(text)
