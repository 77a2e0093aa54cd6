"""Live mode: `kvsim events --zmq` judges a publisher's stream as it flows. A pure-pyzmq publisher speaking
vLLM's protocol (PUB frames topic / 8-byte big-endian sequence / msgpack batch; ROUTER replay answering a
start sequence number, then an end marker of -1) shows a lost batch as EV-8 and a replayed one as no
finding; vLLM's own ZmqEventPublisher, run in the vLLM venv, is judged end to end (skipped when absent).
Endpoints are ipc:// sockets in a temporary folder."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
import zmq

from kvsim.sim.cli import main
from kvsim.sim.peers.judges import live
from kvsim.sim.peers.judges.events import PRESETS, EventChecker

REPO = Path(__file__).resolve().parents[2]
ENGINES = REPO / "sim" / "peers" / "samples" / "engines"
PACK = msgspec.msgpack.Encoder()


def _batch(seq: int) -> bytes:
    """Batch ``seq``: a store of one block chained onto batch seq-1's block (hash seq + 1)."""
    ev = {"type": "BlockStored", "block_hashes": [seq + 1], "parent_block_hash": seq or None,
          "token_ids": [seq, seq], "block_size": 2, "lora_id": None, "medium": "GPU", "future_field": [1]}
    return PACK.encode([float(seq), [ev], 0])


class FakePublisher(threading.Thread):
    """Publishes the given sequence numbers once a subscriber has joined (XPUB sees the subscription), each
    after a frame on another topic the subscriber must filter out; with ``replay`` it answers replay requests
    from every batch it ever made (0..max)."""

    def __init__(self, ctx, endpoint, seqs, replay=None, topic=b""):
        super().__init__(daemon=True)
        self.topic = topic
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.bind(endpoint)
        self.router = None
        if replay:
            self.router = ctx.socket(zmq.ROUTER)
            self.router.bind(replay)
        self.seqs, self.requests = seqs, []
        self.done = threading.Event()

    def run(self):
        if self.pub.poll(10_000):
            self.pub.recv()  # the subscription message
        for s in self.seqs:
            self.pub.send_multipart([b"other", s.to_bytes(8, "big"), b"not for this subscriber"])
            self.pub.send_multipart([self.topic, s.to_bytes(8, "big"), _batch(s)])
        deadline = time.monotonic() + 10
        while self.router is not None and not self.done.is_set() and time.monotonic() < deadline:
            if self.router.poll(50):
                ident, _, start = self.router.recv_multipart()
                first = int.from_bytes(start, "big")
                self.requests.append(first)
                for s in range(first, max(self.seqs) + 1):
                    self.router.send_multipart([ident, b"", b"", s.to_bytes(8, "big"), _batch(s)])
                self.router.send_multipart([ident, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])
        self.pub.close(0)
        if self.router is not None:
            self.router.close(0)


def _run(tmp_path, seqs, replay, topic=b"kv"):
    ctx = zmq.Context()
    ep, rep = f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    pub = FakePublisher(ctx, ep, seqs, rep if replay else None, topic)
    pub.start()
    checker = EventChecker(block_size=2)
    seen = []
    run = live.judge(checker, ep, replay=rep if replay else None, topic=topic.decode(), duration=20, context=ctx,
                     on_finding=seen.append, on_batch=lambda r: r.last_seq == max(seqs))
    pub.done.set()
    pub.join(5)
    ctx.term()
    return checker, run, seen, pub


def test_a_lost_batch_is_ev8_at_the_next_batch(tmp_path):
    checker, run, seen, _ = _run(tmp_path, [0, 1, 3, 4], replay=False)
    assert [(f.rule, f.line) for f in seen] == [("EV-8", 3), ("EV-3", 3)]  # and batch 3's parent is unknown
    assert "2..2 missing" in seen[0].message and run.batches == 4


def test_a_replayed_batch_is_no_finding(tmp_path):
    checker, run, seen, pub = _run(tmp_path, [0, 1, 3, 4], replay=True)
    assert seen == [] and run.batches == 5 and run.replayed == 1 and pub.requests == [2]
    assert checker.stats["stored"] == 5 and checker.counts["EV-8"] == 0


def test_a_late_join_replays_from_zero(tmp_path):
    checker, run, seen, pub = _run(tmp_path, [3, 4], replay=True)
    assert seen == [] and pub.requests == [0] and run.replayed == 3 and run.first_seq == 0


def test_ev8_fires_on_a_restart_and_keeps_on_contiguous_numbers():
    c = EventChecker()
    for s in (0, 1, 2):
        c.sequence(s, s)
    assert c.findings == []
    c.sequence(0, 3)
    assert [(f.rule, f.line) for f in c.findings] == [("EV-8", 3)]


def test_cli_prints_findings_as_they_happen(tmp_path, capsys):
    ctx = zmq.Context()
    ep = f"ipc://{tmp_path}/pub"
    pub = FakePublisher(ctx, ep, [0, 1, 3], topic=b"kv@0")
    pub.start()
    assert main(["events", "--zmq", ep, "--topic", "kv@0", "--duration", "3", "--block-size", "2", "--hash",
                 "none"]) == 1
    pub.join(5)
    ctx.term()
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    assert out[0].startswith(f"{ep}:3: EV-8 sequence numbers 2..2 missing (1 batch lost, not replayed)")
    assert out[-1].startswith("FAIL: ") and len(out) == 3  # EV-8, then batch 3's orphan parent (EV-3)
    assert f"{ep}: FAIL (msgpack (live) form, 3 batches" in cap.err


def test_cli_ctrl_c_exits_130_with_a_summary(tmp_path, capsys, monkeypatch):
    def interrupted(checker, *a, **kw):
        checker.batch([], 0)
        raise KeyboardInterrupt
    monkeypatch.setattr(live, "judge", interrupted)
    assert main(["events", "--zmq", f"ipc://{tmp_path}/none"]) == 130
    cap = capsys.readouterr()
    assert cap.err.splitlines()[0] == "kvsim events: interrupted after 1 batches: summary follows"
    assert "PASS (msgpack (live) form, 1 batches" in cap.err and cap.out.startswith("PASS: ")


def test_cli_nothing_received_is_exit_2(tmp_path, capsys):
    assert main(["events", "--zmq", f"ipc://{tmp_path}/silent", "--duration", "0.3"]) == 2
    assert capsys.readouterr().err.startswith("--zmq: no KV-event batch")


@pytest.mark.parametrize("argv,first", [
    (["events"], "kvsim events: name a log"),
    (["events", "x.jsonl", "--zmq", "ipc:///tmp/x"], "kvsim events: --zmq: judge either"),
    (["events", "x.jsonl", "--replay", "ipc:///tmp/x"], "kvsim events: --replay: only with --zmq"),
    (["events", "--zmq", "ipc:///tmp/x", "--duration", "0"],
     "kvsim events: --duration must be a number of seconds > 0"),
])
def test_live_flags_are_validated(argv, first, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(first)


def _vllm_python() -> Path:
    return Path(os.environ.get("KVSIM_VLLM_PYTHON", REPO / ".engines" / "vllm" / "bin" / "python"))


@pytest.mark.skipif(not _vllm_python().exists(), reason="no vLLM venv (KVSIM_VLLM_PYTHON, default "
                    ".engines/vllm/bin/python; scripts/install-engine vllm builds it)")
def test_vllm_real_publisher_judged_live_with_replay(tmp_path):
    """vLLM's ZmqEventPublisher publishes three batches before kvsim subscribes (replayed from its ROUTER
    socket), then the rest: every hash recomputes, no finding."""
    ep, rep = f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    proc = subprocess.Popen([str(_vllm_python()), str(ENGINES / "vllm_events.py"), "--publish", ep, rep],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    try:
        ready = proc.stdout.readline().strip()
        assert ready == "READY", "the vLLM publisher did not start"
        checker = EventChecker(preset=PRESETS["vllm"])
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault("run", live.judge(
            checker, ep, replay=rep, duration=60, on_batch=lambda r: r.batches >= 8)))
        t.start()
        time.sleep(1.0)  # the SUB socket connects
        proc.stdin.write("go\n")
        proc.stdin.flush()
        t.join(90)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    run = out["run"]
    assert run.batches == 8 and run.replayed == 3 and run.first_seq == 0
    assert checker.findings == [] and checker.stats["recomputed"] == checker.stats["stored"] == 24


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-p", "no:xdist", "-q"]))
