"""The rule catalogue: one record per rule id, its seed clause, its checker and its coverage counters.

Importing this package registers every rule family (`kvsim.spec.rules`), so `catalogue.all_rules()` is
complete wherever the catalogue can be imported from.
"""

from kvsim.spec import rules  # noqa: F401  (registers every family)
