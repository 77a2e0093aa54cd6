"""`kvsim peer vllm|sglang` options for hybrid groups and the Host tier: each bad combination is one line on stderr
and exit 2, found before any engine starts (no engine venv needed)."""

import pytest

from kvsim.sim.cli import main

BASE = ["synthetic:hybrid-stress", "--requests", "3", "--engine-python", "/nonexistent/python"]


@pytest.mark.parametrize("engine, extra, says", [
    ("vllm", ["--kv-groups", "sliding:16:64"], "at least one full group"),
    ("vllm", ["--kv-groups", "full:16,swa:16"], "kind must be one of"),
    ("vllm", ["--kv-groups", "full:16", "--block-size", "16"], "leave --block-size out"),
    ("sglang", ["--kv-groups", "full:16,sliding:16:64,sliding:16:128"], "at most one sliding and one mamba"),
    ("sglang", ["--kv-groups", "full:16,full:32"], "one full group"),
    ("sglang", ["--kv-groups", "full:16,sliding:32:64"], "needs block 16"),
    ("sglang", ["--kv-groups", "full:16,mamba:24"], "must divide one another"),
    ("sglang", ["--offload-blocks", "8"], "not driven by kvsim yet"),
    ("vllm", ["--offload-blocks", "8", "--kv-groups", "full:16,mamba:16"], "one full-attention group only"),
    ("vllm", ["--offload-blocks", "8", "--fail-loads", "1.5"], "not a probability"),
    ("vllm", ["--fail-loads", "0.5"], "only with --offload-blocks"),
    ("vllm", ["--ack-delay", "3"], "without --offload-blocks"),
])
def test_a_bad_combination_is_one_line_and_exit_2(engine, extra, says, capsys):
    assert main(["peer", engine, *BASE, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_good_options_reach_the_engine_probe(capsys):
    rc = main(["peer", "vllm", *BASE, "--kv-groups", "full:16,sliding:16:64,mamba:64"])
    assert rc == 2 and "--engine-python" in capsys.readouterr().err
    for groups in ("full:16,sliding:16:64", "full:16,mamba:64", "full:16,sliding:16:64,mamba:64"):
        rc = main(["peer", "sglang", *BASE, "--kv-groups", groups])
        assert rc == 2 and "--engine-python" in capsys.readouterr().err
    rc = main(["peer", "vllm", *BASE, "--offload-blocks", "8", "--ack-delay", "2", "--fail-loads", "0.2"])
    assert rc == 2 and "--engine-python" in capsys.readouterr().err
