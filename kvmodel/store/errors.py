"""Outcomes a store transaction can have besides success: a typed refusal or a contract violation.

A *refusal* is an answer a correct store may give to a request (capacity, entitlement, rows); a
*violation* is a fact the store contract forbids, tagged with the rule id of DESIGN §7. Either way the
model state is exactly as it was before the call. `ConfigError` is an unsupported configuration;
`InvariantError` is a bug inside the model (an internal invariant broke).
This module knows nothing of traces or reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Finding:
    """One broken rule: the rule id, a one-line message and the entities involved."""

    rule: str
    message: str
    context: dict = field(default_factory=dict)


class ContractViolation(Exception):
    """A fact or result that the store contract forbids; carries one or more findings."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__("; ".join(f"{f.rule}: {f.message}" for f in findings))

    @property
    def rules(self) -> list[str]:
        return [f.rule for f in self.findings]


def violation(rule: str, message: str, **context: object) -> ContractViolation:
    """Build a single-finding violation (the common case)."""
    return ContractViolation([Finding(rule, message, context)])


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request a correct store may refuse; the model's own refusals give one of REFUSAL_REASONS (a replayed
    engine refusal may carry the engine's own words)."""

    reason: str
    detail: str = ""
    bounded_at: int | None = None  # kv_lease_growth: the frontier the request completes at


REFUSAL_REASONS = ("capacity", "rows", "entitlement", "context", "frontier", "busy", "growth-disabled",
                   "engine")


class InvariantError(RuntimeError):
    """An internal invariant of the model broke: a bug in kvsim (or its caller), never in the trace.

    The message names the invariant and the likely culprit; the command line reports it as an internal
    error (exit 3). Raised instead of `assert`, so that it also holds under `python -O`.
    """

    def __init__(self, invariant: str, detail: str) -> None:
        self.invariant = invariant
        super().__init__(f"invariant {invariant!r} broken: {detail}")


class ConfigError(ValueError):
    """An unsupported or inconsistent store configuration (the rule it breaks, and why)."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"{rule}: {message}")
