"""TS-GEO-3..7: the released scheduler's configuration gate against the cache concepts' configuration clauses,
probed through its bindings (sim.peers.tokenspeed.config_probe, named by dotted path: the catalogue never imports sim;
`kvsim peer tokenspeed --probe-config`)."""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_P = "kvsim.sim.peers.tokenspeed.config_probe.run_probes"


def _rule(rule_id: str, title: str, clause: str, decisions: str, checker: str = _P,
          tests: tuple[str, ...] = (), context: tuple[str, ...] = ()) -> None:
    transition_rule(rule_id, title, clause, checker, decisions, scope="cache", tests=tests, context=context)


_rule("TS-GEO-3", "A State group declares its checkpoint span as block_granularity: a positive divisor of P, never 0",
      'cache concepts L62: "a snapshot group\'s block_granularity equals its checkpoint_granularity numerically"; L64: '
      '"CacheGroupSpec.block_granularity is required and explicit: a positive divisor of prefix_granularity, rejected '
      'by SchedulerConfig::Validate() before construction ... There is no zero-means-default fallback — every group '
      'states its span"; L318', "Probes state_bg_p and state_bg_half (a State group of block_granularity P, P/2: the "
      "gate must accept) and state_bg_0 (0: the gate must refuse). The released wheel (0.1.42) does the opposite: "
      "'a State group has no token span: block_granularity must be 0 (its two slots hold whole recurrent states, "
      "not token rows)' -- its compact two-slot row is what `kvsim peer --state-group` records and TS-ST-* read.",
      tests=("tests/peers/test_config_probe.py::test_a_gate_that_accepts_the_seeds_state_spans_keeps",
             "tests/peers/test_config_probe.py::test_the_wheels_findings_state_group_span_and_chunk_budget"))
_rule("TS-GEO-4", "The gate refuses a sliding State group",
      'cache concepts L19: "A checkpoint summarizes everything before it, so nothing in it ever slides out: retention '
      'is always full_history"; L341: "the C++ CacheGroupConfig::Validate refuses a sliding State group at the '
      'bridge"', "Probe state_sliding: CacheGroupConfig(State, sliding_window_tokens=128).validate() must raise.",
      tests=("tests/peers/test_config_probe.py::test_the_wheels_gate_refuses_sliding_state_and_bad_spans_and_its_bindings_are_grep_zero",
             "tests/peers/test_config_probe.py::test_a_gate_that_accepts_everything_fires_every_rule"))
_rule("TS-GEO-5", "The gate refuses a history group's block_granularity 0 or a non-divisor of P",
      'cache concepts L64: "a positive divisor of prefix_granularity, rejected by SchedulerConfig::Validate() before '
      'construction"; L318: "every group states its span, with no zero-means-default fallback, and the coordinator '
      'asserts a positive divisor of P at construction"', "Probes full_bg_0, swa_bg_0 and full_bg_48 (P = 64) must "
      "be refused, full_bg_32 accepted, each by a raised diagnostic (a probe process that ends without answering is "
      "a disagreement: the gate must run before any member asserts).",
      tests=("tests/peers/test_config_probe.py::test_the_wheels_gate_refuses_sliding_state_and_bad_spans_and_its_bindings_are_grep_zero",
             "tests/peers/test_config_probe.py::test_a_gate_that_accepts_everything_fires_every_rule"))
_rule("TS-GEO-6", "Validate() is the single, explicit gate; the CapacityModel runs its sizing half",
      'cache concepts L319: "SchedulerConfig::Validate() is the single configuration gate: every scheduler scalar, '
      'every CacheGroupConfig::Validate(), and the cross-checks between them (P divisibility, PD transfer policy, '
      'one-cache-block chunks for a recurrent-state group). Its sizing half, ValidateCapacityInputs(), is the same '
      'checks minus the page counts ... Python callers must also pass Scheduler(config) explicitly"',
      "Probes: Scheduler() without a configuration refused; CapacityModel refuses a non-divisor block_granularity "
      "yet accepts a configuration without page counts, which the Scheduler refuses; a State group with a chunk "
      "budget (max_scheduled_tokens) below one prefix page refused. The last reads 'one-cache-block chunks' as a "
      "chunk budget of at least one of the group's cache blocks, the prefix page a State checkpoint falls on (the "
      "wheel's State group declares no span of its own); the wheel accepts 32 tokens with P = 64. PD transfer "
      "policy is not probed.",
      tests=("tests/peers/test_config_probe.py::test_the_wheels_gate_refuses_sliding_state_and_bad_spans_and_its_bindings_are_grep_zero",
             "tests/peers/test_config_probe.py::test_the_wheels_findings_state_group_span_and_chunk_budget"))
_rule("TS-GEO-7", "No page_size, row or checkpoint vocabulary in the scheduler's bindings",
      'cache concepts L50: "The identifier page_size must not appear anywhere in tokenspeed-scheduler"; L317: "the '
      'identifiers page_size, rows_per_page, entry_stride_tokens and checkpoint_granularity are grep-zero across '
      'tokenspeed-scheduler (csrc, tests, python bindings)"; L52: "Nor does the word \\"paged\\" belong in cache-group '
      'type names"', "The installed package is scanned: every binding object's names and docstrings (classes, "
      "methods, properties, to depth 4) and the bytes of every file of the package (the extension module "
      "included). A class whose name contains 'Paged' fires too. csrc and the tests are not shipped in the wheel, "
      "so only the bindings half of the grep is judged.", "kvsim.sim.peers.tokenspeed.config_probe.vocabulary",
      tests=("tests/peers/test_config_probe.py::test_the_wheels_gate_refuses_sliding_state_and_bad_spans_and_its_bindings_are_grep_zero",
             "tests/peers/test_config_probe.py::test_a_gate_that_accepts_everything_fires_every_rule"))
