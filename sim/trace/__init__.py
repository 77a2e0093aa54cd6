"""kvtrace/1: typed records, JSON Schema, streaming reader/writer, header config, generated workloads."""
