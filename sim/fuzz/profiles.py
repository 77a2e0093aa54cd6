"""Hypothesis settings profiles for the fuzzing machines: `ci` (fast and derandomized: every machine well
under a minute on two cores, the same examples on every run) and `deep` (long runs, many steps). Registered by name,
never loaded globally: the machines'
tests and campaigns apply them per machine, so other property tests keep their own settings."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

PROFILES: dict[str, dict[str, Any]] = {
    "ci": dict(max_examples=40, stateful_step_count=40, derandomize=True),  # CI: the same runs every time
    "deep": dict(max_examples=400, stateful_step_count=120),
}
COMMON: dict[str, Any] = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True,
                              report_multiple_bugs=False)

for _name, _values in PROFILES.items():
    settings.register_profile(_name, **_values, **COMMON)


def profile_settings(name: str, **overrides) -> settings:
    """The named profile's settings (with overrides), without loading it as the global default."""
    if name not in PROFILES:
        raise ValueError(f"unknown fuzz profile {name!r}; expected one of {', '.join(PROFILES)}")
    return settings(settings.get_profile(name), **overrides)
