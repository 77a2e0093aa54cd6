"""Driving the released TokenSpeed scheduler (PyPI ``tokenspeed-scheduler``, extra ``peers``) with a workload, every
plan judged as it happens by ``sim.peers.cachetrace`` and ``sim.peers.judges.events``.

The adapter, one module per concern: ``loop`` (the run loop: submit, plan, answer, acknowledge, drain; three
clocks), ``config`` (``RunConfig``, the wheel's ``SchedulerConfig`` and the cachetrace/1 header), ``translate``
(the wheel's plans, ops and events to cachetrace/1 records and back), ``wheel`` (importing the wheel, guarding
its calls, keeping its logging off kvsim's output). The runtime it stands in for and the checks it adds:
``object_store`` (the L3 object store answering the scheduler's ``Storage*`` ops), ``faults`` (named faults
injected into the recorded plans), ``config_probe`` (the wheel's configuration gate against the seed),
``paths`` (the engine paths a run took) and ``counters`` (its deep counters, PEER-9). The wheel is imported
when a run or probe starts, never by importing this package.
"""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.config import RunConfig, unbounded_pages
from kvsim.sim.peers.tokenspeed.loop import RunOutcome, run
from kvsim.sim.peers.tokenspeed.wheel import available, version

__all__ = ["available", "version", "RunConfig", "RunOutcome", "unbounded_pages", "run"]
