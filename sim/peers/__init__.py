"""Peers: real schedulers and engines kvsim drives and judges from outside, one room per job.

* ``vllm/``, ``sglang/``, ``tokenspeed/``: one package per engine -- its driver (run in the engine's own venv,
  importing nothing of kvsim) or, for TokenSpeed, its in-process adapter and the runtime it stands in for; the
  engine paths a run can take, its deep counters, its eviction policy.
* ``cachetrace/``: the cachetrace/1 contract judge (TokenSpeed's TS-* rules) and its parts.
* ``judges/``: the engine-neutral judges -- KV-event streams and block hashes, the live ZMQ stream, the engine
  step judge, path coverage, and what makes an engine's finding actionable: the engine frames of its drivers'
  ledgers (``frames``), the structure checks' glue (``actionable``), one cause, one finding (``peer_recovery``).

Three modules stay here because every engine room uses them and none owns them: ``engines`` runs any block-table
engine's driver process and feeds its steps to the judges, ``workload`` expands a workload's hash ids into the token
ids every engine is given, and ``report`` builds the kvreport/1 report from whichever judges ran; beside
``engines``, ``peer_log`` (an engine run as a kvsim-peer/1 log, re-judged without the engine) and ``shrink`` (a
failing run reduced to a minimal one) serve every engine too. Adapters turn what a peer shows into cachetrace/1 or
KV-event records; the judges know the records, never the peer.
"""
