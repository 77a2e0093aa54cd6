"""Two shapes of vLLM's Host-tier (CPU) events and how the vLLM preset reads them (EV-3's and EV-4's entries):
a store whose parent comes later in the same batch (the offloading connector publishes a job's blocks in key-set
order) is a counted forward reference, not an orphan; a placeholder store (block size 0, no tokens) is accepted
where vLLM documents it and is EV-4 for a full-attention block of a stream whose stores describe themselves."""

from kvsim.sim.peers.judges.events import PRESETS, EventChecker, parse_batch


def store(h, parent, tokens, medium="CPU", kind="full_attention", bs=4):
    return {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": parent, "token_ids": tokens,
            "block_size": bs, "medium": medium, "group_idx": 0, "kv_cache_spec_kind": kind}


def check(batches, preset=True):
    c = EventChecker(preset=PRESETS["vllm"], hash_scheme="none") if preset else EventChecker(hash_scheme="none")
    for n, b in enumerate(batches, start=1):
        c.batch(parse_batch([n, b, 0])[0], n)
    return c


def test_a_parent_later_in_the_batch_is_a_forward_reference_not_an_orphan():
    batch = [store(2, 1, [4, 5, 6, 7]), store(1, None, [0, 1, 2, 3])]
    c = check([batch])
    assert c.findings == [] and c.stats["forward_parents"] == 1
    assert [f.rule for f in check([batch], preset=False).findings] == ["EV-3"]
    # a parent that never comes stays an orphan
    assert [f.rule for f in check([[store(2, 1, [4, 5, 6, 7])]]).findings] == ["EV-3"]


def test_placeholders_where_vllm_documents_them_and_where_a_payload_was_lost():
    ph = {"type": "BlockStored", "block_hashes": [9], "parent_block_hash": None, "token_ids": [], "block_size": 0,
          "medium": "CPU", "group_idx": 0}
    legacy = check([[{**ph, "kv_cache_spec_kind": "full_attention"}]])  # the medium never described its stores
    assert legacy.findings == [] and legacy.stats["placeholders"] == 1
    window = check([[store(1, None, [0, 1, 2, 3])], [{**ph, "kv_cache_spec_kind": "sliding_window"}]])
    assert window.findings == []
    lost = check([[store(1, None, [0, 1, 2, 3])], [{**ph, "kv_cache_spec_kind": "full_attention"}]])
    assert [(f.rule, f.line) for f in lost.findings] == [("EV-4", 2)] and "payload was lost" in lost.findings[0].message
    # the placeholder's hash is live: its removal is no EV-1
    gone = check([[store(1, None, [0, 1, 2, 3])], [{**ph, "kv_cache_spec_kind": "full_attention"}],
                  [{"type": "BlockRemoved", "block_hashes": [9], "medium": "CPU", "group_idx": 0}]])
    assert [f.rule for f in gone.findings] == ["EV-4"]
