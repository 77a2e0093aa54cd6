"""vLLM's sparse state-group stores (EV-4's and EV-7's entries): in align mode a Mamba group keeps only its
checkpoint block, and its BlockStored names that one hash while its token_ids cover every block since the parent.
The committed log (sim/peers/samples/findings/vllm_mamba_sparse_store.*, recorded from vLLM 0.33.0 by `kvsim peer
vllm --kv-groups full:16,mamba:16`) is clean under the vLLM preset, every hash recomputed through the skipped
blocks; one token changed is EV-7; without the preset the store is EV-4."""

import json
from pathlib import Path

from kvsim.sim.cli import main
from kvsim.sim.peers.judges.events import PRESETS, EventChecker, parse_batch

LOG = Path(__file__).resolve().parents[2] / "sim/peers/samples/findings/vllm_mamba_sparse_store.events.jsonl"


def judge(lines: list[str], **kw) -> EventChecker:
    c = EventChecker(**kw)
    for n, raw in enumerate(lines, start=1):
        c.batch(parse_batch(json.loads(raw))[0], n)
    return c


def test_the_recorded_sparse_store_is_clean_under_the_vllm_preset_and_recomputes():
    c = judge(LOG.read_text().splitlines(), preset=PRESETS["vllm"])
    assert c.findings == [] and c.stats["sparse_stores"] == 1 and c.stats["unverifiable"] == 0
    assert c.stats["recomputed"] == c.stats["stored"]


def test_one_token_of_a_skipped_block_changed_is_ev_7():
    lines = LOG.read_text().splitlines()
    first = json.loads(lines[0])
    mamba = next(e for e in first[1] if e.get("group_idx") == 1)
    mamba["token_ids"][20] += 1  # a token of the second block: not named by the store, still under its hash
    lines[0] = json.dumps(first)
    c = judge(lines, preset=PRESETS["vllm"])
    assert [f.rule for f in c.findings] == ["EV-7"] and "sparse store" in c.findings[0].message


def test_without_the_preset_the_sparse_store_is_ev_4(tmp_path):
    rc = main(["events", str(LOG), "--hash", "vllm-sha256", "--quiet", "--json", str(tmp_path / "r.json")])
    r = json.loads((tmp_path / "r.json").read_text())
    assert rc == 1 and {v["rule"] for v in r["violations"]} == {"EV-4", "EV-7"}
    rc = main(["events", str(LOG), "--engine", "vllm", "--no-reuse-reports", "--quiet"])
    assert rc == 0

