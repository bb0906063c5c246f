"""`make finetune ... ARGS=--full`: every parameter of the tiny Llama-style base trains,
its decoder layers sharded with FSDP2 over gloo. Two processes must give the losses one
process gives on the same seeded batches (each rank's rows, summed loss scaled to the
global batch's mean); the merged folder is a model AutoModelForCausalLM loads."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.finetune.test_finetune import PAIRS, _one_line, digests, write_pairs
from workloads.finetune import cli, full, lora

#: 1 vs 2 processes: the same sums, added in another order (float32), so only rounding.
LOSS_RTOL = 1e-4
WEIGHT_ATOL = 1e-4
STEPS = ("--steps", "4", "--learning-rate", "1e-2", "--batch-size", "4", "--log-every", "1")


@pytest.fixture(scope="module")
def runs(llama_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """``{processes: OUT}``, one run each, from the same seed."""
    root = tmp_path_factory.mktemp("full")
    pairs = write_pairs(root / "pairs.jsonl")
    before = digests(llama_base)
    outs = {}
    for nproc in (1, 2):
        out = root / f"out{nproc}"
        args = [str(llama_base), "--data", str(pairs), "--out", str(out), *STEPS]
        if cli.main([*args, "--full", "--nproc", str(nproc)]) != 0:
            pytest.fail(f"{nproc} process(es) failed; the workers' output:\n{_newest_log()}")
        outs[nproc] = out
    assert digests(llama_base) == before  # the base folder is never changed
    return outs


def _newest_log() -> str:
    """The tail of the newest workers' log `full._workers_failed` kept, if any."""
    logs = sorted(Path(tempfile.gettempdir()).glob("finetune-workers-*.log"), key=os.path.getmtime)
    return logs[-1].read_text()[-6000:] if logs else "(no log)"


def _record(out: Path) -> dict[str, object]:
    record: dict[str, object] = json.loads((out / "finetune.json").read_text())
    return record


def test_two_fsdp2_processes_match_one(runs: dict[int, Path]) -> None:
    one, two = (_record(runs[n]) for n in (1, 2))
    assert one["mode"] == two["mode"] == "full"
    assert two["options"]["nproc"] == 2  # type: ignore[index]
    # Each of the base's 2 decoder layers is an FSDP2 unit of its own.
    assert one["options"]["sharded_layers"] == two["options"]["sharded_layers"] == 2  # type: ignore[index]
    steps = [s for s, _ in one["losses"]]  # type: ignore[attr-defined]
    assert steps == [1, 2, 3, 4] == [s for s, _ in two["losses"]]  # type: ignore[attr-defined]
    a = torch.tensor([loss for _, loss in one["losses"]])  # type: ignore[attr-defined]
    b = torch.tensor([loss for _, loss in two["losses"]])  # type: ignore[attr-defined]
    torch.testing.assert_close(b, a, rtol=LOSS_RTOL, atol=1e-6)
    assert a[-1] < a[0]  # it learned
    m1 = AutoModelForCausalLM.from_pretrained(runs[1] / "merged").state_dict()
    m2 = AutoModelForCausalLM.from_pretrained(runs[2] / "merged").state_dict()
    assert m1.keys() == m2.keys()
    for name in m1:
        torch.testing.assert_close(m2[name], m1[name], rtol=0, atol=WEIGHT_ATOL)


def test_the_merged_model_is_the_fine_tuned_one(runs: dict[int, Path], llama_base: Path) -> None:
    out = runs[2]
    assert sorted(p.name for p in out.iterdir()) == ["finetune.json", "merged"]  # no adapter/
    record = _record(out)
    assert record["trainable_parameters"] == record["total_parameters"]
    assert record["base"]["digest"] == lora.folder_digest(llama_base)  # type: ignore[index]
    tuned = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    base = AutoModelForCausalLM.from_pretrained(llama_base).eval()
    # Every weight moved (all of them trained), and so did the logits.
    moved = {
        name: float((p - base.state_dict()[name]).abs().max())
        for name, p in tuned.state_dict().items()
    }
    assert min(moved.values()) > 0, moved
    ids = torch.tensor([list((PAIRS[0][0] + PAIRS[0][1]).encode())])
    with torch.no_grad():
        change = (tuned(input_ids=ids).logits - base(input_ids=ids).logits).abs().max()
    assert float(change) > 1e-2
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / "merged" / name).read_bytes() == (llama_base / name).read_bytes()


def test_full_mode_errors_are_one_line(
    llama_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\nnot json\n')
    # Found by the workers (they tokenize DATA): rank 0's line, relayed.
    args = [str(llama_base), "--data", str(bad), "--out", str(out), "--full", "--nproc", "2"]
    assert cli.main(args) == 2
    _one_line(capsys, "line 2: not JSON")
    assert cli.main([*args[:-1], "0"]) == 2
    _one_line(capsys, "--nproc): 1 to")
    with pytest.raises(SystemExit) as exited:
        cli.main([*args[:5], "--nproc", "2"])
    assert exited.value.code == 2 and "add --full" in capsys.readouterr().err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


#: What torchrun prints when a worker raises (the tail; the traceback lines elided).
TORCHRUN_STDERR = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "x.py", line 1, in <module>
[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 20272)
============================================================
"""


def test_failed_workers_are_one_line_and_a_kept_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    line = full._workers_failed(1, TORCHRUN_STDERR)
    assert "\n" not in line and "rank 1: RuntimeError: [gloo" in line
    (log,) = tmp_path.glob("finetune-workers-*.log")
    assert f"their output: {log};" in line and log.read_text() == TORCHRUN_STDERR
    killed = TORCHRUN_STDERR.replace("exitcode  : 1", "exitcode  : -9")
    killed = "\n".join(ln for ln in killed.splitlines() if not ln.startswith("[rank"))
    assert "killed by signal 9" in full._workers_failed(1, killed)
    # Rank 0's own message says what to fix: no log then.
    mine = full._workers_failed(1, "finetune: line 2: not JSON\n" + TORCHRUN_STDERR)
    assert mine == "line 2: not JSON; nothing at OUT changed"
    assert len(list(tmp_path.glob("*.log"))) == 2
