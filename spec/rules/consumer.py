"""CONS-*: consumers read through paged views within the frozen valid frontier; codec and attention.

The model checks the read domain of every launch (CONS-1); the physical checks run in the lockstep driver
(`kvsim replay --lockstep`), which the catalogue names by dotted path: `spec` never imports `sim`. CONS-2 and
CONS-3 judge kvsim's own physical implementation (evidence "model", store contract "Kernel correctness不依赖
physical page ID连续性"): an engine's kernels never appear in a trace.
"""

from __future__ import annotations

from kvsim.spec.catalogue import clause_rule, transition_rule

transition_rule("CONS-1", "Consumers read through paged views within the frozen valid frontier",
                'store contract: "read domain 不超过该 sequence 的 frozen valid frontier"',
                "kvsim.sim.lockstep.Lockstep.check_row",
                decisions="The model rejects a launch whose read domain [0, b) holds stale columns "
                          "(kvmodel.store.units._write_findings); the lockstep checks that every active row's "
                          "physical table equals the membership mirror over its committed blocks.",
                tests=("tests/rules/test_cons.py::test_cons1_keeps_reads_within_the_valid_frontier",
                       "tests/rules/test_cons.py::test_cons1_fires_on_a_read_over_stale_columns",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "write", "unit", "row"))

transition_rule("CONS-2", "Correctness is independent of physical id order; no whole-context gather",
                'store contract: "Kernel correctness不依赖physical page '
                'ID连续性，也不通过gather建立request-contiguous KV"',
                "kvsim.sim.lockstep.Lockstep.check_row",
                evidence="model",
                decisions="Decision 19 (what CONS-2/CONS-3 judge; store contract \"Growing-cache Ops 直接消费 paged "
                          "views\", \"Paging 不引入 gather-to-contiguous cache\"): the clause is about kernels, and a "
                          "trace records store transitions, never a kernel's reads, so the engine's kernels are not "
                          "checkable from kvtrace/1; this rule judges kvsim's own physical implementation (evidence "
                          "`model`, a self-check under `kvsim replay --lockstep`). Lockstep: the read domain maps no "
                          "hole and no aliased page, whatever the (engine- or allocator-chosen) physical order; "
                          "attention stages one tile of pages at a time (gpu.attention), and its output is compared "
                          "with the oracle under CONS-3.",
                tests=("tests/test_lockstep.py::test_lockstep_checks_are_exercised",
                       "tests/test_lockstep.py::test_cons2_fires_on_a_hole_or_an_alias_in_the_read_domain"),
                context=("seq", "pool", "row"))

transition_rule("CONS-3", "Codec bytes are bit-exact; paged attention equals the FP64 oracle within tolerance",
                'store contract: "Exact persistent codec 由 kv_cache_append.h 定义"',
                "kvsim.sim.lockstep.Lockstep.check_attention",
                evidence="model",
                decisions="Decision 19: judges kvsim's own codec and attention (evidence `model`; the engine's "
                          "kernels are not checkable from a trace, which carries no bytes). "
                          "Lockstep, after every completed unit: each active sequence's committed codes and "
                          "scales read back page by page equal the codec of its content keys' content; paged "
                          "attention over the unit's rows equals the FP64 oracle over the decoded K/V within "
                          "rel-L2 1e-4 (kernel error; codec error has its own budget in gpu.accuracy), inert "
                          "columns exactly zero.",
                tests=("tests/test_lockstep.py::test_lockstep_checks_are_exercised",
                       "tests/test_lockstep.py::test_cons3_fires_when_a_cow_tail_is_not_copied",
                       "tests/test_lockstep.py::test_cons3_fires_on_content_written_under_the_wrong_key",
                       "tests/test_lockstep.py::test_cons3_fires_when_a_host_restore_is_skipped",
                       "tests/test_lockstep.py::test_cons3_fires_when_attention_drifts_from_the_oracle"),
                context=("seq", "pool", "row", "layer", "seqs"))

clause_rule("CONS-4", "A paged view holds one layer's planes and one table row; no allocator, identity or frontier",
            'store contract: "View 只包含一个 layer 的 plane tensors 与一行 block table"',
            not_checkable="Views are in-process objects handed to kernels; a trace records store transitions, not "
                          "the views, so their contents cannot be judged from it. What a view reads is judged "
                          "through the table rows (AS-3, CONS-1 under lockstep).")

clause_rule("CONS-5", "Plane and block-table bases are stable; page ids and identity never enter graph keys",
            'store contract: "Plane bases与 block-table matrix base在 Engine lifetime内稳定"',
            not_checkable="kvtrace/1 carries no Device addresses and no CUDA Graph keys; only table contents and "
                          "rows, which are judged by AS-1 and AS-3.")

clause_rule("CONS-6", "Address translation: b = p >> 6, o = p & 63, g = block_table[b], then the closed order",
            'store contract: "logical_block = position >> 6", "Page-major 地址为", "Head-major 地址为", "Code 与 scale '
            'planes 使用同一个 (g)"',
            not_checkable="A trace carries table contents (judged by AS-3, PAGE-2, CONS-1) but no Device addresses, "
                          "strides or kernel reads, so an engine's address arithmetic cannot be judged from it.",
            decisions="Decision 20 (nothing silently left out): kvsim's own physical implementation computes these "
                      "formulas in gpu/planes.py (translate, the plane shapes and closed strides its views check) "
                      "and tests/gpu checks every element address against the seed's page-major and head-major "
                      "formulas; the batched view selects table_rows[b] first, then the same translation.")
