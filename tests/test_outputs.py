"""Outputs, signals and pipes as a user meets them: the `kvsim` console script in a subprocess, run from a deep
folder, never on a terminal (DESIGN §11).

No case replaces a device, a FIFO or a link to one with a regular file, overwrites an input, exits 1 without
a violation, prints a traceback, or drops a finding from a piped log. ``python tests/test_outputs.py``
prints the table (command -> exit -> first line).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("kvsim")
KVSIM = [str(SCRIPT)] if SCRIPT.exists() else \
    [sys.executable, "-c", "import sys; from kvsim.sim.cli import main; sys.exit(main())"]
LEGAL = ROOT / "scenarios" / "concurrent_readers.jsonl"
VIOLATION = ROOT / "scenarios" / "violations" / "TRACE-2_launch_finished_sequence.jsonl"
WORKLOAD = ROOT / "sim" / "peers" / "samples" / "tiny_workload.jsonl"
EVENT_LOG = ROOT / "sim" / "peers" / "samples" / "vllm_native_sha256.jsonl"
FINDINGS = 70


def many_findings(path: Path) -> None:
    """A trace with 70 independent root findings (each sequence launched after it finished: TRACE-2)."""
    header = json.loads(VIOLATION.read_text(encoding="utf-8").splitlines()[0])
    header.pop("meta", None)
    lines = [json.dumps(header)]
    for i in range(FINDINGS):
        s = f"s{i}"
        row = {"seq": s, "pool": "main"}
        lines += [json.dumps({"op": "activate", "seq": s, "prompt": 64, "budget": 0}),
                  json.dumps({"op": "map", "seq": s, "pool": "main", "tokens": 64}),
                  json.dumps({"op": "launch", "unit": f"a{i}", "rows": [dict(row, write=[0, 64])]}),
                  json.dumps({"op": "complete", "unit": f"a{i}", "commit": [dict(row, frontier=64)]}),
                  json.dumps({"op": "finish", "seq": s}),
                  json.dumps({"op": "launch", "unit": f"b{i}", "rows": [dict(row, write=[64, 65])]})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("outputs")
    for i in range(10):
        d = d / f"a-rather-long-folder-name-{i}"
    d.mkdir(parents=True)
    shutil.copy(LEGAL, d / "t.jsonl")
    shutil.copy(WORKLOAD, d / "w.jsonl")
    many_findings(d / "many.jsonl")
    return d


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERM", "COLUMNS")}
    e.update(NO_COLOR="1", **extra)
    return e


def kvsim(workdir: Path, *argv: str, stdin: bytes | None = None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KVSIM, *argv], cwd=workdir, input=stdin if stdin is not None else b"",
                          capture_output=True, timeout=300, env=env(KVSIM_REPORTS=str(workdir / "reports"), **extra))


def text(p: subprocess.CompletedProcess) -> tuple[str, str]:
    return p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def first_line(p: subprocess.CompletedProcess) -> str:
    out, err = text(p)
    lines = (err if err.strip() else out).strip().splitlines()
    return lines[0] if lines else ""


def kind(path: Path) -> str:
    m = os.lstat(path).st_mode
    return "link" if stat.S_ISLNK(m) else "char" if stat.S_ISCHR(m) else "fifo" if stat.S_ISFIFO(m) else \
        "file" if stat.S_ISREG(m) else "other"


def no_temporaries(folder: Path) -> bool:
    return not any(f.name.endswith(".part") for f in folder.iterdir())


# ------------------------------------------------------------------------------------------ written through

def test_a_full_device_is_exit_2_naming_it_and_stays_a_device(workdir: Path) -> None:
    if os.geteuid() == 0:  # a private node, never the system's /dev/full
        full = workdir / "full"
        if not full.exists():
            os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    else:
        full = Path("/dev/full")
    p = kvsim(workdir, "replay", "t.jsonl", "--json", str(full))
    out, err = text(p)
    assert p.returncode == 2, err
    assert err.strip() == f"{full}:0: cannot write: No space left on device"
    assert kind(full) == "char" and "Traceback" not in err


def test_a_fifo_is_written_through_to_its_reader(workdir: Path) -> None:
    fifo = workdir / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    p = kvsim(workdir, "replay", "t.jsonl", "--json", fifo.name, "--quiet")
    reader.join(60)
    assert p.returncode == 0, text(p)[1]
    assert kind(fifo) == "fifo"
    assert json.loads(got[0])["format"] == "kvreport/1"


@pytest.mark.parametrize("name", ["-", "/dev/stdout", "link-to-fd-1"])
def test_standard_output_gets_the_report_alone_and_the_console_goes_to_stderr(workdir: Path, name: str) -> None:
    if name == "link-to-fd-1":
        link = workdir / name
        if not link.is_symlink():
            os.symlink("/proc/self/fd/1", link)
    p = kvsim(workdir, "replay", "t.jsonl", "--json", name)
    out, err = text(p)
    assert p.returncode == 0, err
    assert json.loads(out)["format"] == "kvreport/1"  # stdout: the report and nothing else
    assert "PASS" in err
    if name == "link-to-fd-1":
        assert kind(workdir / name) == "link"


def test_a_link_to_a_regular_file_writes_its_target_and_stays_a_link(workdir: Path) -> None:
    (workdir / "target.json").write_text("old\n")
    os.chmod(workdir / "target.json", 0o640)
    link = workdir / "report-link.json"
    link.unlink(missing_ok=True)
    os.symlink("target.json", link)
    p = kvsim(workdir, "replay", "t.jsonl", "--json", link.name, "--quiet")
    assert p.returncode == 0, text(p)[1]
    assert kind(link) == "link"
    assert json.loads((workdir / "target.json").read_text())["format"] == "kvreport/1"
    assert stat.S_IMODE(os.stat(workdir / "target.json").st_mode) == 0o640
    assert no_temporaries(workdir)


# ------------------------------------------------------------------------------------------ inputs kept

@pytest.mark.parametrize("argv,option", [
    (["replay", "t.jsonl", "--json", "t.jsonl"], "--json"),
    (["replay", "t.jsonl", "--markdown", "./t.jsonl"], "--markdown"),
    (["replay", "t.jsonl", "--json", "t-link.jsonl"], "--json"),
    (["simulate", "w.jsonl", "--requests", "3", "--record", "w.jsonl"], "--record"),
    (["generate", "t.jsonl", "--events", "10", "--seed", "0"], None),
])
def test_an_output_that_is_an_input_is_refused_before_any_work(workdir: Path, argv: list[str],
                                                                option: str | None) -> None:
    link = workdir / "t-link.jsonl"
    if not link.is_symlink():
        os.symlink("t.jsonl", link)
    before = {n: (workdir / n).read_bytes() for n in ("t.jsonl", "w.jsonl")}
    p = kvsim(workdir, *argv)
    if option is None:  # generate has no input: writing its OUT is what it is for
        assert p.returncode == 0
        shutil.copy(LEGAL, workdir / "t.jsonl")
        return
    out, err = text(p)
    assert p.returncode == 2, err
    assert re.match(rf"^kvsim {argv[0]}: {option} \S+: is also an input of this run \(", err), err
    assert len(err.strip().splitlines()) == 1
    assert {n: (workdir / n).read_bytes() for n in before} == before


def test_standard_input_redirected_from_the_output_file_is_refused(workdir: Path) -> None:
    with open(workdir / "t.jsonl", "rb") as f:
        p = subprocess.run([*KVSIM, "replay", "-", "--json", "t.jsonl"], cwd=workdir, stdin=f, capture_output=True,
                           env=env(KVSIM_REPORTS=str(workdir / "reports")), timeout=300)
    assert p.returncode == 2, p.stderr
    assert b"is also an input of this run (<stdin>)" in p.stderr
    assert (workdir / "t.jsonl").read_bytes() == LEGAL.read_bytes()


# ------------------------------------------------------------------------------------------ pipes and logs

def test_a_closed_pipe_is_a_quiet_141(workdir: Path) -> None:
    script = shlex.join(KVSIM) + " rules | head -1 > /dev/null; echo ${PIPESTATUS[0]}"
    p = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True, env=env(), timeout=300)
    assert p.stdout.decode().strip() == "141", p.stderr
    assert b"Traceback" not in p.stderr and p.stderr.strip() == b""


def test_every_finding_reaches_a_piped_log(workdir: Path) -> None:
    p = kvsim(workdir, "replay", "many.jsonl")
    out, err = text(p)
    assert p.returncode == 1
    assert sum(" TRACE-2 " in line for line in out.splitlines()) == FINDINGS
    assert "more" not in out


def test_max_findings_caps_and_says_so(workdir: Path) -> None:
    out, _ = text(kvsim(workdir, "replay", "many.jsonl", "--max-findings", "5"))
    assert sum(" TRACE-2 " in line for line in out.splitlines()) == 5
    assert f"… and {FINDINGS - 5} more findings not printed (capped by --max-findings 5); --json F writes a report " \
           f"listing all {FINDINGS}" in out
    out, _ = text(kvsim(workdir, "replay", "many.jsonl", "--max-findings", "5", "--json", "many-report.json"))
    assert f"… and {FINDINGS - 5} more findings not printed (capped by --max-findings 5); many-report.json lists " \
           f"all {FINDINGS}" in out
    assert len(json.loads((workdir / "many-report.json").read_text())["violations"]) == FINDINGS


def test_github_format_logs_every_finding_and_groups_annotations_per_file(workdir: Path) -> None:
    out, _ = text(kvsim(workdir, "replay", "many.jsonl", "--format", "github"))
    lines = out.splitlines()
    annotations = [line for line in lines if line.startswith("::error")]
    assert sum(line.startswith("many.jsonl:") and " TRACE-2 " in line for line in lines) == FINDINGS
    assert annotations == [a for a in annotations if "file=many.jsonl" in a] and len(annotations) == 1
    assert f"{FINDINGS} findings in this file (TRACE-2)" in annotations[0]
    few = text(kvsim(workdir, "replay", str(VIOLATION), "--format", "github"))[0]
    assert [line for line in few.splitlines() if line.startswith("::error file=")], few  # one each


def test_progress_lines_on_stderr_when_it_is_not_a_terminal(workdir: Path) -> None:
    p = kvsim(workdir, "simulate", "synthetic", "--requests", "100", KVSIM_PROGRESS_INTERVAL="0.01")
    err = text(p)[1]
    assert p.returncode == 0, err
    assert re.search(r"^kvsim simulate: simulating synthetic: [\d,]+/100 requests, \d+s elapsed$", err, re.M), err
    quiet = kvsim(workdir, "simulate", "synthetic", "--requests", "100", "--quiet", KVSIM_PROGRESS_INTERVAL="0.01")
    assert "elapsed" not in text(quiet)[1]


# ------------------------------------------------------------------------------------------ formats

def test_events_names_a_kvtrace_and_replay_names_an_event_log(workdir: Path) -> None:
    p = kvsim(workdir, "events", "t.jsonl")
    assert p.returncode == 2
    assert first_line(p) == "t.jsonl:1: this is a kvtrace/1 trace (store events), not a KV-event log: replay it " \
                            "with `kvsim replay t.jsonl`"
    p = kvsim(workdir, "replay", str(EVENT_LOG))
    assert p.returncode == 2
    assert first_line(p).endswith(f"not a kvtrace/1 trace: judge it with `kvsim events {EVENT_LOG}`")


def test_check_names_bundled_scenarios_the_same_from_any_folder(workdir: Path) -> None:
    p = kvsim(workdir, "check", "--out", "check-reports", "--quiet")
    assert p.returncode == 0, text(p)[1]
    paths = [i["path"] for i in json.loads((workdir / "check-reports" / "kvreport.json").read_text())["inputs"]]
    assert paths and all(path.startswith("scenarios/") for path in paths), paths[:3]


# ------------------------------------------------------------------------------------------ signals

def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # heard even when the tests run in the background


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("wait", [0.0, 0.05, 0.2, 0.5])
def test_a_signal_at_any_moment_of_start_up_is_one_line_and_its_status(workdir: Path, sig: int, wait: float) -> None:
    """From kvsim's first line on: 128 + sig with one line, no traceback, no file. Before it (the interpreter
    starting, the console-script launcher's own ``import re``) Python's defaults apply: the process ends by
    the signal (status -sig: a shell shows 128 + sig), and a SIGINT landing in the launcher's imports prints
    Python's KeyboardInterrupt traceback, whose frames are all outside kvsim."""
    out = workdir / f"sig-{sig}-{wait}.json"
    p = subprocess.Popen([*KVSIM, "replay", "t.jsonl", "--json", out.name], cwd=workdir, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=_interruptible, env=env())
    if wait:
        threading.Event().wait(wait)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    message = err.decode()
    if "Traceback" in message:  # before kvsim's first line: only the launcher's and the standard library's frames
        assert p.returncode == -sig and not re.search(r"kvsim/(sim|spec|kvmodel)/", message), message
        return
    if p.returncode == 0:  # it finished before the signal came: nothing to judge
        return
    assert p.returncode in (128 + sig, -sig), message
    assert len(message.strip().splitlines()) <= 1, message
    if p.returncode == 128 + sig:
        assert message.startswith("kvsim: interrupted"), message
    assert no_temporaries(workdir)
    if out.exists():  # the signal came after the report was complete (a loaded machine): it is whole, not partial
        doc = json.loads(out.read_text())
        assert doc.get("format") == "kvreport/1" and "partial" not in doc, doc.keys()


def test_fuzz_stopped_by_sigterm_writes_what_it_has_marked_partial(workdir: Path) -> None:
    report = workdir / "fuzz.json"
    p = subprocess.Popen([*KVSIM, "fuzz", "--machine", "store", "--budget", "120", "--json", report.name,
                          "--found", "found"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env(KVSIM_PROGRESS_INTERVAL="0.2"))
    assert p.stderr is not None
    first = p.stderr.readline().decode()  # the first progress line: the campaign runs
    assert first.startswith("kvsim fuzz: machine store: "), first
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    lines = [line for line in err.decode().splitlines() if "elapsed" not in line]
    assert p.returncode == 143, lines
    assert lines == [f"kvsim: interrupted (SIGTERM) after 0 of 1 machines (store interrupted): wrote {report.name} "
                     "(partial: what was done before the signal)"]
    doc = json.loads(report.read_text())
    assert doc["partial"] == {"signal": "SIGTERM", "done": "0 of 1 machines (store interrupted)"}
    assert doc["verdict"] == "incomplete" and doc["failed"] is False  # nothing judged: never a pass, no failure found
    assert doc["headline"].startswith("INCOMPLETE: interrupted by SIGTERM") and "INCOMPLETE" in out.decode()



def test_check_stopped_by_ctrl_c_reports_the_scenarios_replayed_marked_partial(workdir: Path) -> None:
    folder = workdir / "many-scenarios"
    (folder / "violations").mkdir(parents=True, exist_ok=True)
    for i in range(300):
        shutil.copy(LEGAL, folder / f"legal-{i:03d}.jsonl")
    p = subprocess.Popen([*KVSIM, "check", "--scenarios", folder.name, "--out", "partial-reports"], cwd=workdir,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_interruptible,
                         env=env(KVSIM_PROGRESS_INTERVAL="0.05", KVSIM_REPORTS=str(workdir / "reports")))
    assert p.stderr is not None
    first = p.stderr.readline().decode()  # the replay runs
    assert first.startswith("kvsim check: "), first
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    lines = [line for line in err.decode().splitlines() if not line.endswith(" elapsed")]
    assert "Traceback" not in err.decode()
    if p.returncode == 0:  # every scenario was replayed before the signal: nothing partial to see
        return
    assert p.returncode == 130, lines
    m = re.match(r"^kvsim: interrupted after (\d+) of 300 scenarios: wrote partial-reports/kvreport\.json, "
                 r"partial-reports/junit\.xml, partial-reports/summary\.md, partial-reports/report\.html \(partial: "
                 r"what was done before the signal\)$", lines[-1])
    assert m, lines
    doc = json.loads((workdir / "partial-reports" / "kvreport.json").read_text())
    assert doc["partial"] == {"signal": "SIGINT", "done": f"{m.group(1)} of 300 scenarios"}
    assert len(doc["inputs"]) == int(m.group(1)) and doc["verdict"] == "incomplete"
    assert doc["headline"].startswith(f"INCOMPLETE: interrupted by SIGINT after {m.group(1)} of 300 scenarios")
    assert "⚠️ INCOMPLETE" in (workdir / "partial-reports" / "summary.md").read_text()
    assert 'errors="1"' in (workdir / "partial-reports" / "junit.xml").read_text()
    assert '<div class="verdict incomplete">' in (workdir / "partial-reports" / "report.html").read_text()
    assert "INCOMPLETE" in out.decode()


def test_an_interrupt_swallowed_where_python_ignores_exceptions_is_delivered_again(monkeypatch) -> None:
    """A KeyboardInterrupt raised in a gc callback or a __del__ ("Exception ignored in ...") prints nothing and
    the signal comes again, so the run still stops; any other unraisable exception goes to Python's hook."""
    from types import SimpleNamespace

    from kvsim.sim.cli import signals
    seen: list[object] = []
    arrived = threading.Event()
    monkeypatch.setattr(signals, "RECEIVED", [signal.SIGUSR1])
    previous = signal.signal(signal.SIGUSR1, lambda *a: arrived.set())
    try:
        hook = signals.unraisable(seen.append)
        hook(SimpleNamespace(exc_value=KeyboardInterrupt()))  # type: ignore[operator]
        assert arrived.wait(60) and seen == []
        other = SimpleNamespace(exc_value=ValueError("x"))
        hook(other)  # type: ignore[operator]
        assert seen == [other]
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signals.REDELIVERED.clear()


if __name__ == "__main__":
    pytest.main([__file__, "-q", "-p", "no:randomly"])


@pytest.mark.parametrize("attempt", range(3))
def test_timeout_s_int_signals_the_group_twice_and_the_partial_report_is_still_written(workdir: Path,
                                                                                        attempt: int) -> None:
    """`timeout -s INT N kvsim ...` sends SIGINT to kvsim and again to its own process group: one request to stop,
    so the report of what was done is written every time (it was lost when the second copy counted as "stop at
    once")."""
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout is not on this machine")
    report = workdir / f"timeout-{attempt}.json"
    p = subprocess.run(["timeout", "-s", "INT", "4", *KVSIM, "fuzz", "--machine", "store", "--budget", "120",
                        "--json", report.name, "--found", "found"], cwd=workdir, capture_output=True, timeout=120,
                       env=env(KVSIM_REPORTS=str(workdir / "reports")), start_new_session=True)
    err = p.stderr.decode()
    assert p.returncode in (124, 130), err  # timeout says 124 when the command ended by its signal
    assert "Traceback" not in err and "stopped at once" not in err, err
    doc = json.loads(report.read_text())
    assert doc["partial"]["signal"] == "SIGINT" and doc["verdict"] != "pass", doc["headline"]


def test_a_second_signal_a_moment_after_the_first_is_the_same_request_to_stop(workdir: Path) -> None:
    """The window `timeout` and a process group leave between two copies of one signal, made deterministic: a
    second SIGINT 0.1 s after the first, while the partial reports (HTML plots included) are being written, still
    lets every one of them be written."""
    folder = workdir / "twice-scenarios"
    (folder / "violations").mkdir(parents=True, exist_ok=True)
    for i in range(300):
        shutil.copy(LEGAL, folder / f"legal-{i:03d}.jsonl")
    p = subprocess.Popen([*KVSIM, "check", "--scenarios", folder.name, "--out", "twice-reports"], cwd=workdir,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_interruptible,
                         env=env(KVSIM_PROGRESS_INTERVAL="0.05", KVSIM_REPORTS=str(workdir / "reports")))
    assert p.stderr is not None
    first = p.stderr.readline().decode()  # the replay runs
    assert first.startswith("kvsim check: "), first
    p.send_signal(signal.SIGINT)
    threading.Event().wait(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    if p.returncode == 0:  # every scenario was replayed before the signal
        return
    # 130, or -2 when the second copy came after kvsim had returned, while the interpreter shut down
    assert p.returncode in (130, -signal.SIGINT), err.decode()
    assert "stopped at once" not in err.decode(), err.decode()
    for name in ("kvreport.json", "junit.xml", "summary.md", "report.html"):
        assert (workdir / "twice-reports" / name).exists(), name
    assert json.loads((workdir / "twice-reports" / "kvreport.json").read_text())["verdict"] == "incomplete"


@pytest.mark.parametrize("attempt", range(3))
def test_timeout_s_int_stops_a_tokenspeed_run_with_its_partial_report(workdir: Path, attempt: int) -> None:
    """`kvsim peer tokenspeed` stopped by `timeout -s INT` writes the plans judged so far, marked partial and
    incomplete (never a pass); its cachetrace/1 record is not renamed into place half written."""
    pytest.importorskip("tokenspeed_scheduler")
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout is not on this machine")
    report, record = workdir / f"ts-{attempt}.json", workdir / f"ts-{attempt}.cachetrace.jsonl"
    workload = ROOT / "sim" / "workloads" / "excerpts" / "mooncake_conversation_500.jsonl"
    p = subprocess.run(["timeout", "-s", "INT", "5", *KVSIM, "peer", "tokenspeed", str(workload), "--pages", "200",
                        "--no-timing", "--json", report.name, "--record", record.name], cwd=workdir,
                       capture_output=True, timeout=120, env=env(KVSIM_REPORTS=str(workdir / "reports")),
                       start_new_session=True)
    err = p.stderr.decode()
    assert p.returncode in (124, 130), err
    assert "Traceback" not in err and "stopped at once" not in err, err
    doc = json.loads(report.read_text())
    assert doc["partial"]["signal"] == "SIGINT" and doc["partial"]["done"].endswith("requests finished")
    assert doc["verdict"] in ("incomplete", "fail"), doc["headline"]
    assert not record.exists() and f"{record.name}: not written (interrupted)" in err
