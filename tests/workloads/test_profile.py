"""`make profile`: a real profiled run writes a Chrome trace that loads as JSON with
trace events (the step's named ranges among them) and the top-operator table, in the
terminal and in Markdown; bad arguments are one message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workloads.training import profile


def test_profile_writes_a_trace_and_the_operator_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profile"
    status = profile.main(
        [
            "--preset",
            "tiny",
            "--out-dir",
            str(out),
            "--data-dir",
            str(tmp_path / "data"),
            "--grad-accum-steps",
            "2",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "2",
            "--rows",
            "5",
        ]
    )
    assert status == profile.EXIT_OK
    trace = json.loads((out / "tiny" / profile.TRACE_FILE).read_text())
    events = trace["traceEvents"]
    assert len(events) > 100
    names = [e.get("name") for e in events]
    # The step's ranges: two micro-steps per step, one optimizer step, two active steps.
    assert names.count("forward") == 4 and names.count("backward") == 4
    assert names.count("optimizer") == 2
    assert any(str(n).startswith("aten::mm") or n == "aten::addmm" for n in names)
    # Only the active steps are recorded (wait and warm-up are not in the trace).
    steps = {n for n in names if str(n).startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}, steps

    table = (out / "tiny" / profile.TABLE_FILE).read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 5
    shares = [float(line.split("|")[5].strip().rstrip("%")) for line in rows]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0
    assert "self CPU ms" in table and "--preset tiny" in table
    peak = re.search(
        r"peak tensor memory allocated \(CPU allocator, recorded steps\): ([0-9.]+) MiB", table
    )
    assert peak is not None and float(peak.group(1)) > 0
    terminal = capsys.readouterr().out
    assert "Self CPU" in terminal and "aten::" in terminal
    assert "events; open it in https://ui.perfetto.dev" in terminal


def test_bad_arguments_are_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    status = profile.main(["--preset", "gpt9", "--active", "0", "--out-dir", str(a_file)])
    assert status == profile.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "--active and --rows must be >= 1" in err
    assert "is a file" in err and "one of tiny" in err
    assert "Traceback" not in err
    assert a_file.read_text() == "mine"


def test_a_trace_it_did_not_write_is_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = tmp_path / "tiny" / profile.TRACE_FILE
    theirs.parent.mkdir()
    theirs.write_text("{}")
    status = profile.main(["--preset", "tiny", "--out-dir", str(tmp_path)])
    assert status == profile.EXIT_USER_ERROR
    assert "was not written by this command" in capsys.readouterr().err
    assert theirs.read_text() == "{}"


def test_peak_tensor_memory_shows_what_activation_checkpointing_saves(tmp_path: Path) -> None:
    """The peak the profiler reports is the activations' real footprint: with
    activation checkpointing it falls by most of what the blocks keep for backward."""
    peaks = {}
    for switch in ("off", "on"):
        out = tmp_path / switch
        status = profile.main(
            [
                "--preset",
                "small",
                "--micro-batch-size",
                "32",
                "--activation-checkpointing",
                switch,
                "--out-dir",
                str(out),
                "--data-dir",
                str(tmp_path / "data"),
                "--wait",
                "0",
                "--warmup",
                "1",
                "--active",
                "1",
            ]
        )
        assert status == profile.EXIT_OK
        peaks[switch] = profile.peak_allocated_mib(out / "small" / profile.TRACE_FILE, cuda=False)
    assert peaks["on"] < 0.6 * peaks["off"], peaks
