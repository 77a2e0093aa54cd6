"""Campaigns share what they find through a real Redis server (Hypothesis' RedisExampleDatabase).

Starts `redis-server` (Debian package redis-server) on a free loopback port and stops it; skips when the
binary or the `redis` client is absent. A first campaign finds a planted bug and saves it; a second one,
with another seed, replays it from the database at once.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from kvsim.kvmodel.store import activation
from kvsim.sim.fuzz.campaign import run_campaign

redis = pytest.importorskip("redis")
SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(SERVER is None, reason="redis-server is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    port = free_port()
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}", client
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_campaigns_share_a_found_bug_through_redis(redis_url, monkeypatch, tmp_path):
    url, client = redis_url
    assert not run_campaign("store", budget_s=1.0, seed=5, database=url, found_dir=tmp_path).failed
    orig = activation.plan_activation

    # planted: a crash when every row is leased
    def crash_on_full_rows(st, seq, prompt, budget, source, keep_source, rows, pages):
        out = orig(st, seq, prompt, budget, source, keep_source, rows, pages)
        if not isinstance(out, tuple) and out.reason == "rows":
            raise AssertionError("planted bug: the row check crashes")
        return out
    monkeypatch.setattr(activation, "plan_activation", crash_on_full_rows)
    first = run_campaign("store", budget_s=60.0, seed=0, database=url, found_dir=tmp_path)
    assert first.failed
    assert client.dbsize() > 0  # the failing example is in Redis
    second = run_campaign("store", budget_s=60.0, seed=12345, database=url, found_dir=tmp_path)
    assert second.failed and second.examples <= 3, second.examples  # replayed from the database first
