"""kvtrace/1 records: DESIGN §6 examples decode and round-trip, field rules hold, the schema is current."""

from __future__ import annotations

import io
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.sim.trace import records as kt
from kvsim.sim.trace.stream import (
    TraceInputError,
    TraceWriter,
    decode_event,
    decode_header,
    encode_line,
    event_from_builtins,
    header_from_builtins,
    open_trace,
    to_builtins,
)

# The header example of DESIGN §6, verbatim.
DESIGN_HEADER = """{"format": "kvtrace/1",
 "config": {"max_context": 4096, "max_concurrency": 4, "page_size": 64, "kv_profile": "bf16",
            "backend": {"kind": "off"},
            "kv_capacity": {"tokens": 16384},
            "model": {"full_attention_layers": 1, "kv_heads": 2, "head_dim": 256},
            "host_arena_bytes": 0, "kv_lease_growth": null},
 "meta": {"source": "free text"}}"""

# One or more handwritten lines per op, following DESIGN §6's table and result examples.
EXAMPLES = [
    '{"op":"activate","seq":"s0","prompt":100,"budget":28}',
    '{"op":"activate","seq":"s1","prompt":300,"budget":64,"from":"c0","keep_source":false,'
    '"result":{"ok":true,"rows":{"main":0},"pages":{"main":[4,5,6]}}}',
    '{"op":"activate","seq":"s2","prompt":10,"budget":10,"result":{"ok":false,"error":"capacity"}}',
    '{"op":"map","seq":"s0","pool":"main","tokens":128,"result":{"ok":true,"pages":[0,1]}}',
    '{"op":"map","seq":"s0","pool":"mtp","tokens":4096,"result":{"ok":false,"error":"entitlement"}}',
    '{"op":"grow","seq":"s0","result":{"ok":true}}',
    '{"op":"grow","seq":"s0","result":{"ok":false,"bounded_at":2048}}',
    '{"op":"launch","unit":"u0","rows":[{"seq":"s0","pool":"main","write":[0,100]},'
    '{"seq":"s1","pool":"draft_full","write":null}]}',
    '{"op":"complete","unit":"u0","commit":[{"seq":"s0","pool":"main","frontier":100}]}',
    '{"op":"fail","unit":"u1","result":{"ok":false,"error":"engine says no"}}',
    '{"op":"truncate","seq":"s0","pool":"main","frontier":64}',
    '{"op":"finish","seq":"s0","retain":"c0","state_image":false}',
    '{"op":"finish","seq":"s1","retain":null}',
    '{"op":"release","ckpt":"c0"}',
    '{"op":"offload","ckpt":"c0","pool":"main","blocks":[0,1]}',
    '{"op":"drop_device","ckpt":"c0","pool":"main","blocks":[0]}',
    '{"op":"drop_host","ckpt":"c0","pool":"main","blocks":[1]}',
    '{"op":"xfer","xfer":"x0","dir":"h2d","ckpt":"c0","pool":"main","blocks":[0],"phase":"release_source"}',
    '{"op":"observe","pool":"main","allocated":3,"available":5}',
    '{"op":"observe","seq":"s0","pool":"main","table":[4,-1,6],"frontier":130}',
    '{"op":"cow","seq":"s1","pool":"main","block":3,"result":{"ok":true,"page":9}}',
]


def test_design_header_example_decodes_verbatim():
    h = decode_header(DESIGN_HEADER)
    c = h.config
    assert (c.max_context, c.max_concurrency, c.page_size, c.kv_profile) == (4096, 4, 64, "bf16")
    assert c.backend == kt.BackendOff() and c.kv_capacity == kt.KVCapacity(tokens=16384)
    assert c.model == kt.Model(full_attention_layers=1, kv_heads=2, head_dim=256)
    assert (c.host_arena_bytes, c.kv_lease_growth, c.prefill_chunk, c.reserved_bytes) == (0, None, 2048, 0)
    assert h.meta == {"source": "free text"}
    assert decode_header(encode_line(h)) == h


def test_examples_cover_every_op_and_round_trip():
    seen = set()
    for text in EXAMPLES:
        ev = decode_event(text)
        seen.add(ev.op)
        line = encode_line(ev)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert decode_event(line) == ev
        written, given_ = json.loads(line), json.loads(text)
        assert set(written) <= set(given_)  # nothing invented; nulls and defaults may be dropped
        assert all(written[k] == given_[k] for k in written if k != "rows" or given_["op"] != "launch")
    assert seen == set(kt.OPS)


def test_defaults_are_omitted_when_written():
    assert encode_line(kt.Finish(seq="s0")) == b'{"op":"finish","seq":"s0"}\n'
    assert encode_line(kt.Activate(seq="s", prompt=1, budget=2, from_="c")) == \
        b'{"op":"activate","seq":"s","prompt":1,"budget":2,"from":"c"}\n'
    ev = decode_event('{"op":"finish","seq":"s0","retain":null,"state_image":true}')
    assert ev == kt.Finish(seq="s0") and ev.retain is None and ev.state_image is True
    assert decode_event('{"op":"activate","seq":"s","prompt":1,"budget":2}').keep_source is True


@pytest.mark.parametrize("backend, expected", [
    ('{"kind":"mtp","draft_window":4}', kt.BackendMTP(draft_window=4, layers=1)),
    ('{"kind":"dflash","full_layers":2}', kt.BackendDFlash(full_layers=2, kv_heads=8, head_dim=128)),
    ('{"kind":"dflash2"}', kt.BackendDFlash2(full_layers=0, kv_heads=8, head_dim=128)),
    ('{"kind":"dflash2","full_layers":0,"kv_heads":4,"head_dim":64}', kt.BackendDFlash2(0, 4, 64)),
])
def test_backend_union_and_defaults(backend, expected):
    h = decode_header(DESIGN_HEADER.replace('{"kind": "off"}', backend))
    assert h.config.backend == expected


def test_capacity_and_lease_growth_forms():
    auto = DESIGN_HEADER.replace('{"tokens": 16384}', '{"auto": {"free_bytes": 100, "headroom_bytes": 7}}')
    assert decode_header(auto).config.kv_capacity.auto == kt.AutoCapacity(free_bytes=100, headroom_bytes=7)
    assert decode_header(DESIGN_HEADER.replace('"kv_capacity": {"tokens": 16384},', '')).config.kv_capacity is None
    growth = decode_header(DESIGN_HEADER.replace('"kv_lease_growth": null', '"kv_lease_growth": {}'))
    assert growth.config.kv_lease_growth == kt.KVLeaseGrowth(window=4096, cushion_pages=2)
    for bad in ('{"tokens": 1, "auto": {"free_bytes": 1, "headroom_bytes": 0}}', '{}', '{"tokens": null}'):
        with pytest.raises(TraceInputError, match="exactly one of 'tokens' or 'auto' at \\$.config.kv_capacity"):
            decode_header(DESIGN_HEADER.replace('{"tokens": 16384}', bad))
    with pytest.raises(ValueError, match="exactly one"):
        kt.KVCapacity()


@pytest.mark.parametrize("text, reason", [
    ('{"op":"observe","pool":"main"}', "observe needs pool counters"),
    ('{"op":"observe","pool":"main","allocated":1,"frontier":3}', "observe without 'seq' cannot carry 'frontier'"),
    ('{"op":"observe","pool":"main","seq":"s","allocated":1,"frontier":3}', "cannot carry pool counter 'allocated'"),
    ('{"op":"observe","pool":"main","seq":"s"}', "needs 'table' and/or 'frontier'"),
    ('{"op":"observe","pool":"main","seq":"s","table":[-2]}', "integer out of range"),
    ('{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[5,4]}]}',
     r"write \[5, 4\] needs a <= b at \$.rows\[0\]"),
    ('{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[1,2,3]}]}', "length 2"),
    ('{"op":"map","seq":"","pool":"main","tokens":1}', "length >= 1"),
    ('{"op":"map","seq":"s","pool":"gpu","tokens":1}', "invalid enum value 'gpu' at \\$.pool"),
    ('{"op":"xfer","xfer":"x","dir":"up","ckpt":"c","pool":"main","blocks":[],"phase":"copy"}', "at \\$.dir"),
    ('{"op":"grow","seq":"s","result":{"ok":false,"error":"x"}}', "unknown field 'error' at \\$.result"),
    ('{"op":"release","ckpt":"c","result":{"ok":1}}', "expected bool, got int at \\$.result.ok"),
])
def test_field_rules(text, reason):
    with pytest.raises(TraceInputError, match=reason):
        decode_event(text)


def test_integer_range_and_boundaries():
    assert decode_event(f'{{"op":"truncate","seq":"s","pool":"main","frontier":{2**63 - 1}}}').frontier == 2**63 - 1
    assert decode_event('{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[3,3]}]}')
    for bad in (str(2**63), "10" + "0" * 30, "-1"):
        with pytest.raises(TraceInputError, match=r"integer out of range .* at \$.frontier$"):
            decode_event(f'{{"op":"truncate","seq":"s","pool":"main","frontier":{bad}}}')
    with pytest.raises(TraceInputError, match="at \\$.config.max_context"):
        decode_header(DESIGN_HEADER.replace('"max_context": 4096', '"max_context": 0'))


def test_every_fact_accepts_a_result_and_requests_are_marked():
    for text in EXAMPLES:
        obj = json.loads(text)
        if obj["op"] in kt.REQUEST_OPS:
            continue
        ev = decode_event(json.dumps({**obj, "result": {"ok": False, "error": "not applied"}}))
        assert ev.result == kt.FactResult(ok=False, error="not applied")
    assert kt.REQUEST_OPS == {"activate", "map", "grow", "cow"} and kt.REQUEST_OPS < set(kt.OPS)


def test_builtins_helpers():
    ev = event_from_builtins({"op": "map", "seq": "s", "pool": "main", "tokens": 64})
    assert ev == kt.Map(seq="s", pool="main", tokens=64)
    assert to_builtins(ev) == {"op": "map", "seq": "s", "pool": "main", "tokens": 64}
    with pytest.raises(ValueError, match="missing field 'tokens'"):
        event_from_builtins({"op": "map", "seq": "s", "pool": "main"})
    assert header_from_builtins(json.loads(DESIGN_HEADER)) == decode_header(DESIGN_HEADER)
    with pytest.raises(ValueError, match="unknown field 'colour' at \\$.config"):
        header_from_builtins(json.loads(DESIGN_HEADER.replace('"page_size"', '"colour": 1, "page_size"')))


# ----------------------------------------------------------------------------------------- generated round trip

U63 = st.integers(0, 2**63 - 1)
IDS = st.text(min_size=1, max_size=6)
POOLS = st.sampled_from(["main", "mtp", "draft_full"])
BLOCKS = st.lists(U63, max_size=4).map(tuple)


def _opt(s):
    return st.none() | s


def _write():
    return _opt(st.tuples(U63, U63).map(sorted).map(tuple))


FACT = _opt(st.builds(kt.FactResult, ok=st.booleans(), error=_opt(st.text(max_size=5))))
EVENTS = st.one_of(
    st.builds(kt.Activate, seq=IDS, prompt=U63, budget=U63, from_=_opt(IDS), keep_source=st.booleans(),
              result=_opt(st.builds(kt.ActivateResult, ok=st.booleans(),
                                    rows=_opt(st.dictionaries(POOLS, U63)),
                                    pages=_opt(st.dictionaries(POOLS, BLOCKS)), error=_opt(st.text())))),
    st.builds(kt.Map, seq=IDS, pool=POOLS, tokens=U63,
              result=_opt(st.builds(kt.MapResult, ok=st.booleans(), pages=_opt(BLOCKS), error=_opt(st.text())))),
    st.builds(kt.Grow, seq=IDS, result=_opt(st.builds(kt.GrowResult, ok=st.booleans(), bounded_at=_opt(U63)))),
    st.builds(kt.Launch, unit=IDS, rows=st.lists(st.builds(kt.LaunchRow, seq=IDS, pool=POOLS, write=_write()),
                                                 max_size=3).map(tuple), result=FACT),
    st.builds(kt.Complete, unit=IDS, commit=st.lists(st.builds(kt.CommitRow, seq=IDS, pool=POOLS, frontier=U63),
                                                     max_size=3).map(tuple), result=FACT),
    st.builds(kt.Fail, unit=IDS, result=FACT),
    st.builds(kt.Truncate, seq=IDS, pool=POOLS, frontier=U63, result=FACT),
    st.builds(kt.Finish, seq=IDS, retain=_opt(IDS), state_image=st.booleans(), result=FACT),
    st.builds(kt.Release, ckpt=IDS, result=FACT),
    *[st.builds(t, ckpt=IDS, pool=POOLS, blocks=BLOCKS, result=FACT) for t in (kt.Offload, kt.DropDevice, kt.DropHost)],
    st.builds(kt.Xfer, xfer=IDS, dir=st.sampled_from(["d2h", "h2d"]), ckpt=IDS, pool=POOLS, blocks=BLOCKS,
              phase=st.sampled_from(["reserve", "copy", "verify", "publish", "release_source"]), result=FACT),
    st.builds(kt.Observe, pool=POOLS, allocated=U63, reserved=_opt(U63), available=_opt(U63), result=FACT),
    st.builds(kt.Observe, pool=POOLS, seq=IDS, frontier=U63,
              table=_opt(st.lists(st.integers(-1, 2**63 - 1), max_size=4).map(tuple)), result=FACT),
)


BACKENDS = st.one_of(st.builds(kt.BackendOff),
                     st.builds(kt.BackendMTP, draft_window=U63, layers=U63),
                     st.builds(kt.BackendDFlash, full_layers=U63, kv_heads=U63, head_dim=U63),
                     st.builds(kt.BackendDFlash2, full_layers=U63, kv_heads=U63, head_dim=U63))
CAPACITY = st.builds(kt.KVCapacity, tokens=U63) | st.builds(
    kt.KVCapacity, auto=st.builds(kt.AutoCapacity, free_bytes=U63, headroom_bytes=U63))
HEADERS = st.builds(
    kt.Header, format=st.just("kvtrace/1"),
    config=st.builds(kt.Config, max_context=st.integers(1, 2**63 - 1), max_concurrency=st.integers(1, 2**63 - 1),
                     page_size=U63, kv_profile=st.sampled_from(["bf16", "int8", "fp8", "nvfp4", "k8v4"]),
                     backend=BACKENDS, model=st.builds(kt.Model, full_attention_layers=U63, kv_heads=U63,
                                                       head_dim=U63),
                     kv_capacity=_opt(CAPACITY), host_arena_bytes=U63,
                     kv_lease_growth=_opt(st.builds(kt.KVLeaseGrowth, window=U63, cushion_pages=U63)),
                     prefill_chunk=U63, reserved_bytes=U63),
    meta=_opt(st.dictionaries(st.text(max_size=4), st.integers(-(2**63), 2**64) | st.text(max_size=4), max_size=3)))


@given(HEADERS)
def test_generated_headers_round_trip(header):
    line = encode_line(header)
    assert decode_header(line) == header
    assert header_from_builtins(to_builtins(header)) == header


@given(EVENTS)
def test_generated_events_round_trip(ev):
    line = encode_line(ev)
    assert decode_event(line) == ev
    assert event_from_builtins(to_builtins(ev)) == ev
    assert encode_line(decode_event(line)) == line  # writing is deterministic


@settings(max_examples=30)
@given(st.lists(EVENTS, max_size=12))
def test_writer_output_reads_back_equal(tmp_path_factory, events):
    header = decode_header(DESIGN_HEADER)
    path = tmp_path_factory.mktemp("rt") / "t.jsonl"
    with TraceWriter(path, header) as w:
        for ev in events:
            w.write(ev)
    with open_trace(path) as r:
        assert r.header == header
        assert [ev for _, _, ev in r] == events
    buf = io.StringIO()
    with TraceWriter(buf, header) as w:
        for ev in events:
            w.write(ev)
    assert buf.getvalue().encode() == path.read_bytes()


def test_writer_refuses_what_would_not_decode():
    sink = io.BytesIO()
    w = TraceWriter(sink, decode_header(DESIGN_HEADER))
    with pytest.raises(ValueError, match="Map would not decode: integer out of range .* at \\$.tokens"):
        w.write(kt.Map(seq="s", pool="main", tokens=-1))
    with pytest.raises(TypeError):
        w.write({"op": "fail", "unit": "u"})  # type: ignore[arg-type]
    assert sink.getvalue().count(b"\n") == 1 and w.events == 0


def test_writer_sorts_dict_keys():
    ev = kt.Activate(seq="s", prompt=1, budget=1, result=kt.ActivateResult(ok=True, rows={"mtp": 1, "main": 0}))
    assert b'"rows":{"main":0,"mtp":1}' in encode_line(ev)


# ----------------------------------------------------------------------------------------- schema

def test_committed_schema_is_current():
    assert kt.SCHEMA_PATH.read_text(encoding="utf-8") == kt.schema_text(), \
        "spec/kvtrace.schema.json is stale: run `python -m sim.trace.records --write-schema`"


def test_schema_shape():
    doc = kt.schema_document()
    defs = doc["$defs"]
    assert doc["oneOf"] == [{"$ref": "#/$defs/Header"}, {"$ref": "#/$defs/Event"}]
    assert set(defs["Event"]["discriminator"]["mapping"]) == set(kt.OPS)
    refs = set()

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.add(node["$ref"].removeprefix("#/$defs/"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)
    assert refs <= set(defs)
    assert defs["Activate"]["properties"]["from"] and "from_" not in defs["Activate"]["properties"]
    assert all(d.get("additionalProperties") is False for n, d in defs.items() if n != "Event")
    assert len(defs["KVCapacity"]["oneOf"]) == 2 and len(defs["Observe"]["oneOf"]) == 3
    assert msgspec.json.decode(kt.schema_text()) == doc


def test_write_schema_cli(tmp_path):
    out = tmp_path / "s.json"
    assert kt.main(["--write-schema", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == kt.schema_text()
    assert kt.main([]) == 2
