"""The fuzzing machines as ordinary pytest tests (HypoFuzz runs these same tests unchanged).

Each machine runs under the `ci` profile by default; `KVSIM_FUZZ_PROFILE=deep` selects the deep one.
A failure writes its shrunk run to reports/found/<machine>-<hash>.jsonl (replayable with `kvsim replay`).
"""

from __future__ import annotations

import os

from kvsim.sim.fuzz.machines import HostMachine, StoreMachine
from kvsim.sim.fuzz.physical import LockstepMachine
from kvsim.sim.fuzz.profiles import profile_settings

PROFILE = os.environ.get("KVSIM_FUZZ_PROFILE", "ci")

TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = profile_settings(PROFILE)

TestHostMachine = HostMachine.TestCase
TestHostMachine.settings = profile_settings(PROFILE)

TestLockstepMachine = LockstepMachine.TestCase
TestLockstepMachine.settings = profile_settings(PROFILE, max_examples=profile_settings(PROFILE).max_examples // 2)
