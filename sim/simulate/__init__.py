"""The scheduler simulation: a deterministic engine loop in virtual time that serves a request workload
through the store model, emitting kvtrace/1 events that are checked exactly as `kvsim replay` checks them.

Modules: `prefix` (a small prefix index over block hashes: which retained checkpoint holds the longest
prefix of a prompt), `reuse` (the reuse a workload allows, computed from its block ids alone), `engine`
(the scheduler), `mtp` (speculative decode rounds under the MTP backend), `inject` (engine fault episodes
injected while the workload runs, and scoring them), `series` (bounded time series for the plots),
`timing` (the replaceable timing model: virtual seconds per iteration), `latency` (per-request latency and
throughput in virtual time), `sweep` (what-if points over an executor), `bench` (the whole-trace benchmark).
"""
