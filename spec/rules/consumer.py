"""CONS-*: consumers read through paged views within the frozen valid frontier; codec and attention.

The model checks the read domain of every launch (CONS-1); the physical checks run in the lockstep driver
(`kvsim replay --lockstep`), which the catalogue names by dotted path: `spec` never imports `sim`.
"""

from __future__ import annotations

from kvsim.spec.catalogue import clause_rule, transition_rule

transition_rule("CONS-1", "Consumers read through paged views within the frozen valid frontier",
                'store contract: "read domain 不超过该 sequence 的 frozen valid frontier"',
                "kvsim.sim.lockstep.Lockstep.check_row",
                decisions="The model rejects a launch whose read domain [0, b) holds stale columns "
                          "(kvmodel.store.units._write_findings); the lockstep checks that every active row's "
                          "physical table equals the membership mirror over its committed blocks.")

transition_rule("CONS-2", "Correctness is independent of physical id order; no whole-context gather",
                'store contract: "Kernel correctness不依赖physical page ID连续性，也不通过gather建立request-contiguous KV"',
                "kvsim.sim.lockstep.Lockstep.check_row",
                decisions="Lockstep: the read domain maps no hole and no aliased page, whatever the (engine- or "
                          "allocator-chosen) physical order; attention stages one tile of pages at a time "
                          "(gpu.attention), and its output is compared with the oracle under CONS-3.")

transition_rule("CONS-3", "Codec bytes are bit-exact; paged attention equals the FP64 oracle within tolerance",
                'store contract: "Exact persistent codec 由 kv_cache_append.h 定义"',
                "kvsim.sim.lockstep.Lockstep.check_attention",
                decisions="Lockstep, after every completed unit: each active sequence's committed codes and "
                          "scales read back page by page equal the codec of its content keys' content; paged "
                          "attention over the unit's rows equals the FP64 oracle over the decoded K/V within "
                          "rel-L2 1e-4 (kernel error; codec error has its own budget in gpu.accuracy), inert "
                          "columns exactly zero.")

clause_rule("CONS-4", "A paged view holds one layer's planes and one table row; no allocator, identity or frontier",
            'store contract: "View 只包含一个 layer 的 plane tensors 与一行 block table"',
            not_checkable="Views are in-process objects handed to kernels; a trace records store transitions, not "
                          "the views, so their contents cannot be judged from it. What a view reads is judged "
                          "through the table rows (AS-3, CONS-1 under lockstep).")

clause_rule("CONS-5", "Plane and block-table bases are stable; page ids and identity never enter graph keys",
            'store contract: "Plane bases与 block-table matrix base在 Engine lifetime内稳定"',
            not_checkable="kvtrace/1 carries no Device addresses and no CUDA Graph keys; only table contents and "
                          "rows, which are judged by AS-1 and AS-3.")
