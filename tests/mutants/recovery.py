"""Seeded bugs of replay's error recovery around ids used again after their end (sim/recovery.py, sim/replay.py's
``_RENEWS``) for `kvsim selfcheck`, in the record format of `catalogue.py` (which concatenates them). Each is killed
by the `recovery` machine (sim/fuzz/recovery_machine.py), whose id-reuse episodes activate, launch or retain an id
of an earlier root cause again and plant a new root cause on the new incarnation. Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="recovery-sequence-reuse-not-renewed", machine="recovery",
         bug="a sequence activated again under an id a root cause desynchronized stays desynchronized: a new root "
             "cause on the new sequence is counted as a consequence of the old one",
         file="sim/replay.py",
         old="_RENEWS = {\"activate\": lambda ev: (\"seq\", ev.seq), ",
         new="_RENEWS = {\"activate\": lambda ev: (\"seq\", None), "),
    dict(name="recovery-unit-reuse-not-renewed", machine="recovery",
         bug="a unit launched again under an id a root cause desynchronized stays desynchronized: its second "
             "completion (a new root cause) is counted as a consequence of the old one",
         file="sim/replay.py",
         old="\"launch\": lambda ev: (\"unit\", ev.unit),",
         new="\"launch\": lambda ev: (\"unit\", None),"),
    dict(name="recovery-checkpoint-reuse-not-renewed", machine="recovery",
         bug="a checkpoint retained again under an id a root cause desynchronized stays desynchronized: a new double "
             "release of it is counted as a consequence of the old one",
         file="sim/replay.py",
         old="           \"finish\": lambda ev: (\"ckpt\", ev.retain),\n",
         new=""),
    dict(name="recovery-renew-keeps-mark", machine="recovery",
         bug="a new incarnation of an id keeps its mark: every id reused after a root cause stays desynchronized",
         file="sim/recovery.py",
         old="        self.marks.pop(key, None)",
         new="        self.marks.get(key)"),
]
