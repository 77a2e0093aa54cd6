"""The rule catalogue: one record per rule id, its seed clause, its checker and its coverage counters."""
