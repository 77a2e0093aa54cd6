"""The engine-neutral judges: what any engine's KV-event stream and block-table decisions must show, whichever
engine produced them.

``events`` judges KV-event streams (EV-1..8), recomputing block hashes under each engine's scheme (``block_hash``);
``live`` subscribes to a running engine's ZMQ publisher and feeds the same checker; ``engine_judge`` judges a block-
table engine's step messages (PEER-5..9, 11) and wires in the engine's own eviction-policy rule
(``sim.peers.ENGINE.policy``: PEER-12, PEER-13) and deep-counter checks; ``path_coverage`` says which engine paths
and rules a run exercised; ``frames`` names the engine frame that last changed what a finding reports (from the
drivers' ledgers), ``actionable`` adds the engines' structure checks (PEER-14, PEER-15) and files every finding
through ``peer_recovery`` (one cause, one finding). They know events and driver messages, never an engine's API, and
import no engine package; TokenSpeed's own contract is ``sim.peers.cachetrace``.
"""
