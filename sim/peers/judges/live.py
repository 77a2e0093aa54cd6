"""Judge a running engine's KV-event stream as it flows: a ZMQ subscriber, the way KV-aware routers
(NVIDIA Dynamo, llm-d) consume vLLM's and SGLang's publishers.

Wire (vLLM ``vllm/distributed/kv_events.py``, ``ZmqEventPublisher``): a PUB socket sends three frames per
batch -- topic, the batch's sequence number as 8 bytes big-endian (0, 1, 2, ...), and the msgpack payload
``[ts, [event, ...], dp_rank]`` whose events are maps tagged by ``type``. The optional ROUTER replay socket
answers a request frame holding a start sequence number (8 bytes big-endian; a DEALER sends it after an
empty delimiter frame) with every buffered batch from that number on, each as ``[empty, topic, seq,
payload]``, then an end marker whose sequence number is -1 and whose payload is empty.

``judge(checker, endpoint, ...)`` subscribes, feeds every batch to an ``EventChecker`` in sequence order,
and hands each finding to ``on_finding`` as soon as it is found. A gap in the sequence numbers is first
replayed from the replay socket when one is given; what cannot be replayed is an EV-8 finding. Batches
published before the subscriber joined are fetched through the replay socket too (ZMQ drops what a PUB
sends before a SUB connects); without one, the first batch seen starts the stream and a note says so.
Wall-clock time only bounds the run (``duration``, the replay wait); it never reaches a finding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import zmq

from kvsim.sim.peers.judges.events import EventChecker, Finding, parse_batch

__all__ = ["LiveInputError", "LiveRun", "judge", "END_SEQ"]

END_SEQ = -1
_MSGPACK = msgspec.msgpack.Decoder()


class LiveInputError(Exception):
    """A frame that is not a KV-event batch; ``str()`` is ``endpoint:seq: reason``."""


@dataclass
class LiveRun:
    """What a live run saw: batches fed, how many came from the replay socket, notes for the user."""
    batches: int = 0
    events: int = 0
    replayed: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    notes: list[str] = field(default_factory=list)


def _decode(endpoint: str, frames: list[bytes]) -> tuple[int, list]:
    if len(frames) != 3:
        raise LiveInputError(f"{endpoint}:0: a KV-event message has 3 frames (topic, sequence, payload), "
                             f"not {len(frames)}")
    _, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise LiveInputError(f"{endpoint}:0: the sequence frame has {len(seq_bytes)} bytes, not 8")
    seq = int.from_bytes(seq_bytes, "big", signed=True)
    try:
        events, _, _ = parse_batch(_MSGPACK.decode(payload))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise LiveInputError(f"{endpoint}:{seq}: {' '.join(str(exc).split())[:200]}") from None
    return seq, events


def _replay(ctx: zmq.Context, endpoint: str, start: int, stop: int | None, wait_s: float) -> list[tuple[int, list]]:
    """Batches ``start <= seq < stop`` from the publisher's replay socket (what its buffer still holds)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    out: list[tuple[int, list]] = []
    try:
        sock.send_multipart([b"", start.to_bytes(8, "big")])
        while sock.poll(int(wait_s * 1000)):
            frames = sock.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            if len(frames) == 3 and int.from_bytes(frames[1], "big", signed=True) == END_SEQ:
                break
            seq, events = _decode(endpoint, frames)
            if seq >= start and (stop is None or seq < stop):
                out.append((seq, events))
    finally:
        sock.close()
    return sorted(out, key=lambda b: b[0])


def judge(checker: EventChecker, endpoint: str, *, replay: str | None = None, topic: str = "",
          duration: float | None = None, on_finding: Callable[[Finding], None] = lambda f: None,
          on_batch: Callable[[LiveRun], bool | None] = lambda r: None, replay_wait_s: float = 2.0,
          context: zmq.Context | None = None) -> LiveRun:
    """Subscribe to ``endpoint`` and judge until ``duration`` seconds pass (forever when None) or
    ``on_batch`` returns True; Ctrl-C raises KeyboardInterrupt with ``checker`` holding everything judged
    so far."""
    ctx = context or zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
    run = LiveRun()
    deadline = None if duration is None else time.monotonic() + duration

    stop = False

    def feed(seq: int, events: list, replayed: bool = False) -> None:
        nonlocal stop
        checker.sequence(seq, seq)
        checker.batch(events, seq)
        run.batches += 1
        run.events += len(events)
        run.replayed += replayed
        if run.first_seq is None:
            run.first_seq = seq
        run.last_seq = seq
        for f in checker.drain():
            on_finding(f)
        stop = bool(on_batch(run)) or stop

    try:
        try:
            sub.connect(endpoint)
        except zmq.ZMQError as exc:
            raise LiveInputError(f"--zmq: cannot connect to {endpoint}: {exc}") from None
        expected: int | None = None
        while True:
            wait = 100 if deadline is None else max(0, min(100, int((deadline - time.monotonic()) * 1000)))
            if not sub.poll(wait):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                continue
            seq, events = _decode(endpoint, sub.recv_multipart())
            if expected is None and seq > 0:
                if replay:
                    back = _replay(ctx, replay, 0, seq, replay_wait_s)
                    for s, evs in back:
                        feed(s, evs, True)
                    start = back[0][0] if back else seq
                    if start > 0:
                        run.notes.append(f"joined at sequence {start}: batches 0..{start - 1} were no longer in "
                                         f"the publisher's replay buffer")
                else:
                    run.notes.append(f"joined at sequence {seq}: batches 0..{seq - 1} were published before "
                                     f"kvsim subscribed (--replay fetches them)")
            elif expected is not None and seq > expected and replay:
                for s, evs in _replay(ctx, replay, expected, seq, replay_wait_s):
                    if s >= expected:
                        feed(s, evs, True)
                        expected = s + 1
            feed(seq, events)
            expected = seq + 1
            if stop or (deadline is not None and time.monotonic() >= deadline):
                break
    finally:
        sub.close()
        if context is None:
            ctx.term()
    return run
