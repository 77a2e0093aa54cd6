"""Workload loaders (Mooncake JSONL, Azure CSV), the synthetic generator and prompt token content."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.sim.workloads import BLOCK_TOKENS, WorkloadInputError, open_workload
from kvsim.sim.workloads.azure import FRESH_ID_BASE, iter_azure
from kvsim.sim.workloads.mooncake import iter_mooncake
from kvsim.sim.workloads.open import excerpt_path, shared_workloads
from kvsim.sim.workloads.synthetic import iter_synthetic
from kvsim.sim.workloads.tokens import VOCAB, block_tokens, prompt_tokens


def test_mooncake_excerpt_streams_every_row_in_order():
    rows = list(open_workload("excerpt:conversation"))
    assert len(rows) == 500 and [r.rid for r in rows] == list(range(500))
    assert rows[0].prompt == 6758 and rows[0].output == 500 and rows[0].hash_ids[:2] == (0, 1)
    assert all(len(r.hash_ids) == -(-r.prompt // BLOCK_TOKENS) for r in rows)
    assert all(a.arrival <= b.arrival for a, b in zip(rows, rows[1:]))
    assert len(list(open_workload("excerpt:synthetic", 7))) == 7


@pytest.mark.parametrize("line, reason", [
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "2)"),
    ('{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}', "not a Mooncake row"),
    ('not json', "not a Mooncake row"),
])
def test_mooncake_bad_rows_name_their_line(tmp_path, line, reason):
    p = tmp_path / "w.jsonl"
    p.write_text('{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [9]}\n' + line + "\n")
    with pytest.raises(WorkloadInputError) as e:
        list(iter_mooncake(p))
    assert str(e.value).startswith(f"{p}:2: ") and reason in str(e.value) and "\n" not in str(e.value)


def test_mooncake_timestamps_must_not_go_back(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text('{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [9]}\n\n'
                 '{"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": [9]}\n')
    with pytest.raises(WorkloadInputError, match=":3: timestamp 4 goes back"):
        list(iter_mooncake(p))


def test_azure_excerpt_gives_fresh_ids_and_relative_arrivals():
    rows = list(iter_azure(excerpt_path("azure-conv")))
    assert len(rows) == 500 and rows[0].arrival == 0.0 and rows[0].prompt == 374 and rows[0].output == 44
    assert rows[1].arrival == pytest.approx(4.3145789, abs=1e-6)
    ids = [h for r in rows for h in r.hash_ids]
    assert len(set(ids)) == len(ids) and min(ids) == FRESH_ID_BASE
    assert len(list(open_workload("excerpt:azure-code", 3))) == 3


def test_azure_bad_header_and_rows(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("A,B,C\n")
    with pytest.raises(WorkloadInputError, match=":1: expected the header"):
        list(iter_azure(p))
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,x\n")
    with pytest.raises(WorkloadInputError, match=":2: not an Azure trace row"):
        list(iter_azure(p))


def test_unknown_workload_names_are_input_errors():
    for spec in ("excerpt:nope", "trace.txt", "synthetic:x"):
        with pytest.raises(WorkloadInputError):
            open_workload(spec)


def test_synthetic_is_seeded_sorted_and_shares_prefixes():
    a = list(iter_synthetic(300, seed=4))
    assert a == list(iter_synthetic(300, seed=4)) and a != list(iter_synthetic(300, seed=5))
    assert len(a) == 300 and all(x.arrival <= y.arrival for x, y in zip(a, a[1:]))
    assert all(len(r.hash_ids) == -(-r.prompt // BLOCK_TOKENS) for r in a)
    firsts = {r.hash_ids[0] for r in a}
    assert len(firsts) <= 4  # every session starts with one of the shared system prompts
    # a later turn keeps its previous prompt's whole blocks
    by_prefix = {r.hash_ids[:3] for r in a if len(r.hash_ids) > 3}
    assert len(by_prefix) < len([r for r in a if len(r.hash_ids) > 3])


def test_block_tokens_are_a_function_of_the_id_and_well_mixed():
    t = block_tokens(42)
    assert t.shape == (512,) and t.dtype == np.int64 and 0 <= t.min() and t.max() < VOCAB
    assert np.array_equal(t, block_tokens(42)) and np.array_equal(block_tokens(42, 100), t[:100])
    # neighbouring ids give unrelated blocks (a weak formula like (id*7919 + j) % V aliases them)
    same = sum(int(np.sum(block_tokens(i) == block_tokens(i + 1))) for i in range(200))
    assert same < 10
    r = next(iter(open_workload("excerpt:conversation", 1)))
    p = prompt_tokens(r)
    assert p.shape == (r.prompt,) and np.array_equal(p[:512], block_tokens(r.hash_ids[0]))


@pytest.mark.skipif(shared_workloads() is None, reason="the full workload files are not beside the repository")
def test_full_files_load_whole():
    folder = shared_workloads()
    assert sum(1 for _ in iter_mooncake(folder / "synthetic_trace.jsonl")) == 3993
    assert sum(1 for _ in iter_azure(folder / "AzureLLMInferenceTrace_code.csv")) == 8819
