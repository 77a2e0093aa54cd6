"""Every edge case of the command line as a user meets it: a subprocess without a terminal, run from a folder
more than 150 characters deep, judged by its exit code and the first line it prints.

The cases are one table (`CASES`): nothing to judge is exit 2, a pipe (`-`, `/dev/stdin`, `<(...)`) is read
once as a stream, a user's mistake is exit 2 with one line naming the argument and the accepted range
(never exit 3, kvsim's own bug), and `--version` / `--help` answer. A Ctrl-C test interrupts a long
simulation: exit 130, one line, the report written marked partial, and no partial `--record` file under its
final name; SIGTERM is 143.

``python tests/test_cli_cases.py [OUT]`` prints the table (command -> exit -> first line) as it stands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KVSIM = [sys.executable, "-c", "import sys; from kvsim.sim.cli import main; sys.exit(main())"]
EXCERPTS = ROOT / "sim" / "workloads" / "excerpts"
SAMPLES = ROOT / "sim" / "peers" / "samples"


@dataclass(frozen=True)
class Case:
    name: str
    argv: str  # shell words after `kvsim`; {x} names a fixture file (see `fixtures`)
    code: int
    first: str  # a regular expression the first printed line must match (searched)
    stdin: str | None = None  # a fixture whose bytes are piped to standard input
    shell: bool = False  # run through bash (process substitution)


CASES = [
    # 2. never pass on nothing
    Case("check-empty-folder", "check --scenarios empty_dir --out out", 2, r"^kvsim check: no scenarios in empty_dir"),
    Case("simulate-empty-workload", "simulate empty.jsonl", 2, r"^empty\.jsonl:1: no requests"),
    Case("simulate-header-only-csv", "simulate header_only.csv", 2, r"^header_only\.csv:1: no requests"),
    Case("simulate-requests-0", "simulate excerpt:conversation --requests 0", 2,
         r"^kvsim simulate: --requests must be >= 1 \(got 0\)$"),
    Case("simulate-synthetic-requests-0", "simulate synthetic --requests 0", 2, r"^kvsim simulate: --requests must be"),
    Case("events-empty-log", "events empty.jsonl", 2, r"^empty\.jsonl:1: empty log"),
    Case("events-blank-log", "events blank.jsonl", 2, r"^blank\.jsonl:\d+: empty log"),
    Case("rules-report-missing", "rules --report missing.json", 2,
         r"^kvsim rules: --report: no such file: missing\.json"),
    Case("selfcheck-only-unknown", "selfcheck --only no-such-mutant", 2,
         r"^kvsim selfcheck: --only: unknown mutant 'no-such-mutant'"),
    Case("selfcheck-workers-0", "selfcheck --workers 0", 2, r"^kvsim selfcheck: --workers must be >= 1 \(got 0\)$"),
    Case("bench-replay-events-negative", "bench replay --events -1", 2,
         r"^kvsim bench: --events must be >= 1 \(got -1\)$"),
    Case("replay-empty-file", "replay empty.jsonl", 2, r"^empty\.jsonl:1: empty file"),
    Case("replay-header-only", "replay header.jsonl", 2, r"^header\.jsonl:1: no events after the header"),
    Case("capacity-empty-file", "capacity empty.jsonl", 2, r"^empty\.jsonl:1: empty file"),
    # 3. pipes: `-` is standard input, /dev/stdin and <(...) are streams read once
    Case("replay-stdin", "replay - --quiet", 0, r"^$|PASS", stdin="legal.jsonl"),
    Case("replay-stdin-report-path", "replay - --quiet --json r.json", 0, r"^$|PASS", stdin="legal.jsonl"),
    Case("replay-dev-stdin", "replay /dev/stdin --quiet", 0, r"^$|PASS", stdin="legal.jsonl"),
    Case("replay-process-substitution", "replay <(cat legal.jsonl) --quiet", 0, r"^$|PASS", shell=True),
    Case("replay-stdin-violation", "replay - --quiet --json r.json", 1, r"^$|FAIL|<stdin>:\d+: ",
         stdin="faulty.jsonl"),
    Case("replay-stdin-empty", "replay -", 2, r"^<stdin>:1: empty file", stdin="empty.jsonl"),
    Case("replay-stdin-header-only", "replay -", 2, r"^<stdin>:1: no events after the header", stdin="header.jsonl"),
    Case("replay-stdin-twice", "replay - -", 2, r"^kvsim replay: standard input \('-'\) can be read only once",
         stdin="legal.jsonl"),
    Case("replay-stdin-cachetrace", "replay - --quiet", 0, r"^$|PASS", stdin="cachetrace.jsonl"),
    Case("replay-cachetrace-process-substitution", "replay <(cat cachetrace.jsonl) --quiet", 0, r"^$|PASS",
         shell=True),
    Case("events-stdin", "events - --hash sha256 --block-size 4 --quiet", 0, r"^$|PASS",
         stdin="vllm_array_sha256.jsonl"),
    Case("events-dev-stdin", "events /dev/stdin --hash sha256 --block-size 4 --quiet", 0, r"^$|PASS",
         stdin="vllm_array_sha256.jsonl"),
    Case("events-stdin-empty", "events -", 2, r"^<stdin>:1: empty log", stdin="empty.jsonl"),
    Case("capacity-stdin", "capacity - --json", 0, r"^\{", stdin="legal.jsonl"),
    Case("rules-report-stdin", "rules --report - --json", 0, r"^\[", stdin="kvreport.json"),
    Case("simulate-stdin-mooncake", "simulate - --format mooncake --requests 5 --pages 4096 --quiet", 0, r"^$|PASS",
         stdin="mooncake.jsonl"),
    Case("simulate-stdin-azure", "simulate - --format azure --requests 5 --pages 4096 --quiet", 0, r"^$|PASS",
         stdin="azure.csv"),
    Case("simulate-dev-stdin-format", "simulate /dev/stdin --format mooncake --requests 5 --pages 4096 --quiet", 0,
         r"^$|PASS", stdin="mooncake.jsonl"),
    Case("simulate-stdin-no-format", "simulate -", 2, r"^kvsim simulate: .*standard input.*--format mooncake\|azure",
         stdin="mooncake.jsonl"),
    Case("simulate-process-substitution-no-format", "simulate <(cat mooncake.jsonl)", 2,
         r"^kvsim simulate: .*--format mooncake\|azure", shell=True),
    Case("simulate-stdin-empty", "simulate - --format mooncake", 2, r"^<stdin>:1: no requests", stdin="empty.jsonl"),
    Case("simulate-stdin-sweep", "simulate - --format mooncake --sweep hbm=24G,32G --quiet", 0, r"^$|PASS",
         stdin="mooncake.jsonl"),
    Case("simulate-stdin-sweep-malformed", "simulate - --format mooncake --sweep hbm=24G,32G", 2,
         r"^<stdin>:3: not a Mooncake row", stdin="broken.jsonl"),
    # 4. a user's mistake is exit 2 with one line, never exit 3
    Case("simulate-csv-not-utf8", "simulate latin1.csv", 2, r"^latin1\.csv:2: not UTF-8"),
    Case("simulate-csv-absurd-tokens", "simulate huge.csv", 2, r"^huge\.csv:2: .*token"),
    Case("simulate-csv-1e21-tokens", "simulate e21.csv", 2, r"^e21\.csv:2: "),
    Case("simulate-mooncake-absurd-output", "simulate huge.jsonl", 2, r"^huge\.jsonl:1: .*token"),
    Case("simulate-dask-unreachable", "simulate excerpt:conversation --requests 5 --sweep pages=1024,2048 "
         "--executor dask://127.0.0.1:9", 2, r"^kvsim simulate: --executor: cannot reach the Dask scheduler"),
    Case("simulate-executor-unknown", "simulate excerpt:conversation --executor nope", 2,
         r"^kvsim simulate: --executor"),
    Case("simulate-record-missing-folder", "simulate excerpt:conversation --requests 5 --record nope/x.jsonl", 2,
         r"^kvsim simulate: --record: no such folder: nope"),
    Case("simulate-json-missing-folder", "simulate excerpt:conversation --requests 5 --json nope/x.json", 2,
         r"^kvsim simulate: --json: no such folder: nope"),
    Case("simulate-hbm-negative", "simulate excerpt:conversation --hbm-bytes -5G", 2,
         r"^kvsim simulate: --hbm-bytes must be a byte size >= 0"),
    Case("simulate-hbm-garbage", "simulate excerpt:conversation --hbm-bytes lots", 2,
         r"^kvsim simulate: --hbm-bytes must be a byte size"),
    Case("simulate-host-negative", "simulate excerpt:conversation --host-bytes=-1", 2,
         r"^kvsim simulate: --host-bytes must be a byte size >= 0"),
    Case("simulate-pages-0", "simulate excerpt:conversation --pages 0", 2, r"^kvsim simulate: --pages must be"),
    Case("simulate-concurrency-1", "simulate excerpt:conversation --concurrency 1", 2,
         r"^kvsim simulate: --concurrency must be >= 2 \(got 1\)"),
    Case("simulate-max-context-0", "simulate excerpt:conversation --max-context 0", 2,
         r"^kvsim simulate: --max-context must be >= 1"),
    Case("simulate-layers-0", "simulate excerpt:conversation --layers 0", 2, r"^kvsim simulate: --layers must be >= 1"),
    Case("simulate-kv-heads-0", "simulate excerpt:conversation --kv-heads 0", 2,
         r"^kvsim simulate: --kv-heads must be >= 1"),
    Case("simulate-prefill-chunk-0", "simulate excerpt:conversation --prefill-chunk 0", 2,
         r"^kvsim simulate: --prefill-chunk must be >= 1"),
    Case("simulate-accept-rate", "simulate excerpt:conversation --accept-rate 1.5", 2,
         r"^kvsim simulate: --accept-rate must be a probability in \[0, 1\]"),
    Case("simulate-accept-rate-nan", "simulate excerpt:conversation --accept-rate nan", 2,
         r"^kvsim simulate: --accept-rate must be a probability"),
    Case("simulate-draft-window-0", "simulate excerpt:conversation --draft-window 0", 2,
         r"^kvsim simulate: --draft-window must be >= 1"),
    Case("simulate-fault-every-0", "simulate excerpt:conversation --fault all --fault-every 0", 2,
         r"^kvsim simulate: --fault-every must be >= 1"),
    Case("simulate-workers-0", "simulate excerpt:conversation --sweep pages=1024,2048 --workers 0", 2,
         r"^kvsim simulate: --workers must be >= 1"),
    Case("simulate-seed-negative", "simulate excerpt:conversation --seed -3", 2,
         r"^kvsim simulate: --seed must be >= 0"),
    Case("simulate-requests-word", "simulate excerpt:conversation --requests ten", 2,
         r"^kvsim simulate: --requests must be an integer >= 1 \(got 'ten'\)"),
    Case("simulate-missing-file", "simulate missing.jsonl", 2, r"^missing\.jsonl:0: cannot read"),
    Case("simulate-unknown-format", "simulate notes.txt", 2, r"^kvsim simulate: .*--format mooncake\|azure"),
    Case("simulate-sweep-bad-axis", "simulate excerpt:conversation --sweep speed=1,2", 2, r"^kvsim simulate: --sweep"),
    Case("simulate-sweep-negative-hbm", "simulate excerpt:conversation --sweep hbm=-1G,2G", 2,
         r"^kvsim simulate: --sweep"),
    Case("simulate-sweep-malformed-row", "simulate broken.jsonl --sweep hbm=24G,32G", 2,
         r"^broken\.jsonl:3: not a Mooncake row"),
    Case("peer-prefix-granularity-0", "peer tokenspeed tiny_workload.jsonl --prefix-granularity 0", 2,
         r"^kvsim peer: --prefix-granularity must be >= 1 \(got 0\)$"),
    Case("peer-requests-0", "peer tokenspeed tiny_workload.jsonl --requests 0", 2, r"^kvsim peer: --requests must be"),
    Case("peer-pages-1", "peer tokenspeed tiny_workload.jsonl --pages 1", 2, r"^kvsim peer: --pages must be >= 2"),
    Case("peer-stagger", "peer tokenspeed tiny_workload.jsonl --stagger -2", 2,
         r"^kvsim peer: --stagger must be >= -1"),
    Case("peer-missing-workload", "peer tokenspeed missing.jsonl", 2, r"missing\.jsonl"),
    Case("peer-excerpt-name", "peer tokenspeed excerpt:azure-code --requests 3 --no-timing --quiet", 0, r"^PASS"),
    Case("peer-synthetic-name", "peer tokenspeed synthetic:2 --requests 3 --no-timing --quiet", 0, r"^PASS"),
    Case("peer-excerpt-unknown", "peer tokenspeed excerpt:nope", 2, r"^excerpt:nope:0: unknown excerpt 'nope'"),
    Case("peer-engine-python-folder-without-python", "peer vllm tiny_workload.jsonl --engine-python empty_dir", 2,
         r"^kvsim peer: --engine-python: is a folder without bin/python: empty_dir \(give the venv's interpreter"),
    Case("peer-options-before-workload", "peer vllm --engine-python no-venv/bin/python tiny_workload.jsonl", 2,
         r"^--engine-python: no-venv/bin/python does not exist"),
    Case("generate-concurrency-0", "generate g.jsonl --concurrency 0", 2,
         r"^kvsim generate: --concurrency must be >= 2 \(got 0\)$"),
    Case("generate-max-context-negative", "generate g.jsonl --max-context -1", 2,
         r"^kvsim generate: --max-context must be >= 64 \(got -1\)$"),
    Case("generate-events-0", "generate g.jsonl --events 0", 2, r"^kvsim generate: --events must be >= 1"),
    Case("generate-into-missing-folder", "generate nope/g.jsonl", 2, r"^kvsim generate: OUT: no such folder: nope"),
    Case("generate-no-output", "generate", 2, r"^kvsim generate: "),
    Case("bench-simulate-missing-workload", "bench simulate --workload missing.jsonl", 2,
         r"^missing\.jsonl:0: cannot read"),
    Case("bench-concurrency-0", "bench replay --concurrency 0", 2, r"^kvsim bench: --concurrency must be >= "),
    Case("bench-contexts-0", "bench attention --contexts 0", 2, r"^kvsim bench: --contexts must be >= 1"),
    Case("bench-json-missing-folder", "bench replay --events 10 --json nope/b.json", 2,
         r"^kvsim bench: --json: no such folder: nope"),
    Case("capacity-max-context-0", "capacity --max-context 0", 2, r"^kvsim capacity: --max-context must be >= 1"),
    Case("capacity-concurrency-0", "capacity --concurrency 0", 2, r"^kvsim capacity: --concurrency must be >= 1"),
    Case("capacity-free-bytes-negative", "capacity --free-bytes -5G", 2,
         r"^kvsim capacity: --free-bytes must be a byte size >= 0"),
    Case("capacity-kv-heads-0", "capacity --kv-heads 0", 2, r"^kvsim capacity: --kv-heads must be >= 1"),
    Case("capacity-absurd-size", "capacity --max-context 1000000000000 --concurrency 1000000", 2,
         r"^kvsim capacity: unsupported config: the main pool would hold [\d,]+ pages, beyond the 16,777,216"),
    Case("replay-absurd-header", "replay huge_header.jsonl", 2,
         r"^huge_header\.jsonl:1: unsupported config: max_concurrency 100,000,000 is beyond"),
    Case("simulate-absurd-pages", "simulate synthetic --pages max --max-context 100000000000", 2,
         r"^kvsim simulate: unsupported config: the main pool would hold"),
    Case("capacity-bad-profile", "capacity --profile fp16", 2, r"^kvsim capacity: --profile: invalid choice"),
    Case("capacity-bad-backend", "capacity --backend mtp:x", 2, r"^kvsim capacity: --backend"),
    Case("fuzz-budget-0", "fuzz --budget 0", 2, r"^kvsim fuzz: --budget must be a number of seconds > 0 \(got .0.\)$"),
    Case("fuzz-budget-nan", "fuzz --budget nan", 2, r"^kvsim fuzz: --budget must be"),
    Case("selfcheck-budget-0", "selfcheck --budget 0", 2,
         r"^kvsim selfcheck: --budget must be a number of seconds > 0"),
    Case("events-block-size-0", "events vllm_array_sha256.jsonl --block-size 0", 2,
         r"^kvsim events: --block-size must be >= 1"),
    Case("events-capacity-negative", "events vllm_array_sha256.jsonl --capacity -1", 2,
         r"^kvsim events: --capacity must be >= 0"),
    Case("events-missing", "events missing.jsonl", 2, r"^missing\.jsonl:0: cannot read"),
    Case("replay-missing", "replay missing.jsonl", 2, r"^missing\.jsonl:0: cannot read"),
    Case("replay-folder", "replay empty_dir", 2, r"^empty_dir:0: cannot read"),
    Case("replay-json-missing-folder", "replay legal.jsonl --json nope/r.json", 2,
         r"^kvsim replay: --json: no such folder: nope"),
    Case("unknown-command", "frobnicate", 2, r"^kvsim: .*invalid choice"),
    Case("unknown-option", "replay legal.jsonl --frobnicate", 2, r"^kvsim: unrecognized arguments: --frobnicate"),
    # 7. conventions
    Case("version", "--version", 0, r"^kvsim \d+\.\d+"),
    Case("help-shows-defaults", "simulate --help", 0, r"^usage: kvsim simulate"),
]


def fixtures(root: Path) -> None:
    """The files the cases name, written into the deep working folder."""
    from kvsim.sim.peers.tokenspeed import available
    from kvsim.sim.replay import replay_trace
    from kvsim.sim.report.build import build_report
    from kvsim.sim.report.kvreport import dumps_report
    from kvsim.sim.trace.generate import generate, generate_with, options_for

    generate(root / "legal.jsonl", 200, seed=0, max_context=1024, concurrency=3)
    with open(root / "faulty.jsonl", "wb") as f:
        generate_with(f, options_for(400, 0, "publish-before-copy"))
    header = (root / "legal.jsonl").read_bytes().split(b"\n")[0]
    (root / "huge_header.jsonl").write_bytes(re.sub(rb'"max_concurrency":\d+', b'"max_concurrency":100000000', header)
                                             + b"\n" + b'{"op":"release","ckpt":"c0"}\n')
    (root / "header.jsonl").write_bytes((root / "legal.jsonl").read_bytes().split(b"\n")[0] + b"\n")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "blank.jsonl").write_bytes(b"\n\n  \n")
    (root / "empty_dir").mkdir()
    (root / "header_only.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n", encoding="utf-8")
    (root / "latin1.csv").write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      b"2023-11-16 18:15:46.6805900,10\xe9,5\n")
    (root / "huge.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2023-11-16 18:15:46.6805900,1000000000000000000000,5\n", encoding="utf-8")
    (root / "e21.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,1e21,5\n",
                                  encoding="utf-8")
    (root / "huge.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 1000000000000000000, '
                                     '"hash_ids": [1]}\n', encoding="utf-8")
    (root / "notes.txt").write_text("hello\n", encoding="utf-8")
    lines = (EXCERPTS / "mooncake_conversation_500.jsonl").read_bytes().split(b"\n")
    (root / "mooncake.jsonl").write_bytes(b"\n".join(lines[:20]) + b"\n")
    (root / "broken.jsonl").write_bytes(b"\n".join(lines[:2]) + b"\n{bad\n")
    lines = (EXCERPTS / "azure_conv_500.csv").read_bytes().split(b"\n")
    (root / "azure.csv").write_bytes(b"\n".join(lines[:20]) + b"\n")
    for name in ("vllm_array_sha256.jsonl", "tiny_workload.jsonl"):
        (root / name).write_bytes((SAMPLES / name).read_bytes())
    (root / "kvreport.json").write_bytes(dumps_report(build_report([replay_trace(root / "legal.jsonl")])))
    if available():  # a clean cachetrace/1 recorded from the tiny workload
        subprocess.run([*KVSIM, "peer", "tokenspeed", str(root / "tiny_workload.jsonl"), "--record",
                        str(root / "cachetrace.jsonl"), "--quiet", "--no-timing"], cwd=root, check=False,
                       capture_output=True)


def deep_folder(base: Path) -> Path:
    """A working folder whose path is longer than 150 characters (consoles must not wrap `path:line`)."""
    d = base
    while len(str(d)) <= 160:
        d = d / "a-rather-long-folder-name-of-a-ci-checkout"
    d.mkdir(parents=True)
    return d


def run_case(case: Case, cwd: Path, timeout: float = 180) -> tuple[int, str, str]:
    """(exit code, first printed line, all of stderr): the first line of stderr, else of stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERM", "COLUMNS")}
    env.update(NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    stdin = (cwd / case.stdin).read_bytes() if case.stdin else b""
    if case.shell:
        cmd = ["bash", "-c", " ".join(shlex.quote(w) for w in KVSIM) + " " + case.argv]
    else:
        cmd = [*KVSIM, *shlex.split(case.argv)]
    try:
        p = subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return -1, f"(still running after {timeout:.0f} s: stopped)", ""
    err, out = p.stderr.decode("utf-8", "replace"), p.stdout.decode("utf-8", "replace")
    text = err if err.strip() else out
    first = text.strip("\n").split("\n")[0] if text.strip() else ""
    return p.returncode, first, err


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = deep_folder(tmp_path_factory.mktemp("cli-cases"))
    fixtures(d)
    return d


def _needs(case: Case, workdir: Path) -> None:
    if case.stdin and not (workdir / case.stdin).exists():
        pytest.skip(f"{case.stdin} could not be made here")
    if "cachetrace.jsonl" in case.argv and not (workdir / "cachetrace.jsonl").exists():
        pytest.skip("no cachetrace/1 sample (tokenspeed-scheduler not installed)")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case, workdir: Path) -> None:
    _needs(case, workdir)
    code, first, err = run_case(case, workdir)
    assert "Traceback" not in err, err
    assert code == case.code, f"kvsim {case.argv}: exit {code}, first line {first!r}\n{err}"
    assert re.search(case.first, first), f"kvsim {case.argv}: first line {first!r} does not match {case.first!r}"
    if code == 2:
        assert len(err.strip().splitlines()) == 1, f"kvsim {case.argv}: more than one line on stderr:\n{err}"


def test_stdin_is_named_the_same_everywhere(workdir: Path) -> None:
    """The report names standard input `<stdin>`, as the error lines do."""
    code, _, err = run_case(Case("", "replay - --quiet --json stdin-report.json", 0, "", stdin="legal.jsonl"), workdir)
    assert code == 0, err
    doc = json.loads((workdir / "stdin-report.json").read_text(encoding="utf-8"))
    assert [i["path"] for i in doc["inputs"]] == ["<stdin>"]
    direct = json.loads((workdir / "kvreport.json").read_text(encoding="utf-8"))
    assert doc["inputs"][0]["sha256"] == direct["inputs"][0]["sha256"]  # the same bytes, hashed in the same pass


def test_help_shows_every_default(workdir: Path) -> None:
    """Every flag's help says its default (hidden ones included: max_context, model geometry, budgets)."""
    for command in ("simulate", "capacity", "generate", "selfcheck", "fuzz", "bench", "peer", "events"):
        p = subprocess.run([*KVSIM, command, "--help"], cwd=workdir, capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"})
        assert p.returncode == 0, p.stderr
        assert "(default: " in p.stdout, command
    p = subprocess.run([*KVSIM, "capacity", "--help"], cwd=workdir, capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    for shown in ("--max-context MAX_CONTEXT", "default: 4096", "--layers", "default: 1", "--kv-heads", "default: 2"):
        assert shown in p.stdout


def _interruptible() -> None:
    """The child hears Ctrl-C even when this test runs in the background (where SIGINT is ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_exit_130_with_one_line_and_no_partial_recording(workdir: Path) -> None:
    """SIGINT during a long simulation: exit 130, one line naming what was written (the report of the requests
    served so far, marked partial), no traceback, and the --record file never appears under its final name (it
    is renamed into place only when complete)."""
    record = workdir / "interrupted.jsonl"
    cmd = [*KVSIM, "simulate", "synthetic", "--requests", "100000", "--record", str(record), "--json",
           str(workdir / "interrupted.json")]
    p = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_interruptible)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the recording has started (a temporary file in the folder)
        if any(f.name.startswith(".interrupted.jsonl") for f in workdir.iterdir()):
            break
        time.sleep(0.2)
    else:
        p.kill()
        pytest.fail("the simulation never started recording")
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    text = err.decode()
    assert p.returncode == 130, text
    assert "Traceback" not in text
    lines = [line for line in text.strip().splitlines() if not line.endswith(" elapsed")]  # progress lines
    assert len(lines) == 1 and re.match(r"^kvsim: interrupted after [\d,]+ events: wrote \S*interrupted\.json "
                                        r"\(partial: what was done before the signal\)$", lines[0]), text
    assert not record.exists()
    report = json.loads((workdir / "interrupted.json").read_text(encoding="utf-8"))
    assert report["partial"]["signal"] == "SIGINT" and "interrupted by SIGINT" in report["headline"]
    assert report["verdict"] != "pass"  # a run cut short is incomplete (or failed), never a pass
    assert not any(f.name.startswith(".interrupted") for f in workdir.iterdir()), "temporary file left behind"


def _wait_reading_a_pipe(pid: int, limit: float = 120) -> None:
    """Until the process sleeps in a pipe read (Linux /proc), or a while where that cannot be seen."""
    wchan = Path(f"/proc/{pid}/wchan")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if "pipe" in wchan.read_text():
                time.sleep(0.5)
                return
        except OSError:
            break
        time.sleep(0.2)
    time.sleep(10)


def test_sigterm_is_handled_like_ctrl_c(workdir: Path) -> None:
    cmd = [*KVSIM, "replay", "-", "--quiet"]
    p = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write((workdir / "legal.jsonl").read_bytes().split(b"\n", 1)[0] + b"\n")  # the header, then nothing
    p.stdin.flush()
    _wait_reading_a_pipe(p.pid)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    text = err.decode()
    assert p.returncode == 143, text
    assert re.match(r"^kvsim: interrupted \(SIGTERM\) after [\d,]+ events: no report written$", text.strip()), text


def table(out) -> None:
    """Print every case: command -> exit -> first line."""
    with tempfile.TemporaryDirectory(prefix="kvsim-cases-") as tmp:
        d = deep_folder(Path(tmp))
        fixtures(d)

        def row(case: Case) -> str:
            pipe = f" < {case.stdin}" if case.stdin else ""
            if (case.stdin and not (d / case.stdin).exists()) or (
                    "cachetrace.jsonl" in case.argv and not (d / "cachetrace.jsonl").exists()):
                return f"kvsim {case.argv}{pipe}  ->  skipped (no sample)"
            code, first, _ = run_case(case, d, timeout=240)
            return f"kvsim {case.argv}{pipe}  ->  {code}  ->  {first}"

        with ThreadPoolExecutor(max_workers=3) as pool:
            for line in pool.map(row, CASES):
                print(line, file=out, flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as fh:
            table(fh)
    else:
        table(sys.stdout)
