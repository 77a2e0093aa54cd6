"""The fault every named fault refines: identity on every record, each subclass perturbing one record once,
at the first place its premise holds (``Fault.fired`` says whether it did); ``write_backs`` picks a plan's
write-backs, the records most faults perturb."""

from __future__ import annotations

from kvsim.sim.trace import cachetrace as ct

__all__ = ["Fault", "write_backs"]


class Fault:
    """Identity on every record; subclasses perturb one."""

    name = ""
    rule = ""
    why = ""

    def __init__(self, config: ct.Config) -> None:
        self.config = config
        self.groups = [g.id for g in config.groups]
        self.fired = False
        self.extra_done: list[int] = []

    def submit(self, rec: ct.Submit) -> None:
        """A request handed to the scheduler (faults that need its prompt or budget keep it; one may perturb it in
        place)."""

    def plan(self, rec: ct.Plan) -> ct.Plan:
        if not self.fired and self._plan(rec):
            self.fired = True
        return rec

    def result(self, res: ct.Result) -> ct.Result:
        if self.extra_done:
            res.done = list(res.done) + self.extra_done
            self.extra_done = []
        return res

    def clear(self, rec: ct.Clear) -> ct.Clear:
        return rec

    def kv(self, rec: ct.KvEvents) -> ct.KvEvents:
        """A batch of KV events the scheduler drained (faults on the event stream perturb one)."""
        return rec

    def _plan(self, rec: ct.Plan) -> bool:
        return False

    def _full_group(self) -> str | None:
        return next((g.id for g in self.config.groups if g.attn_kind == "full"), None)


def write_backs(rec: ct.Plan, pinned: bool | None = True) -> list[ct.CacheOp]:
    return [op for op in rec.cache if op.kind == "WriteBackOp" and op.pages and
            (pinned is None or (op.pinned is not False) == pinned)]
