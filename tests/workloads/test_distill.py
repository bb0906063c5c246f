"""``make distill``: the loss function, a short distillation from the session's DDP run
(its checkpoint, run record and data) into a smaller student whose checkpoint the
trainer resumes, and the one-line refusals of bad inputs."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from tests.workloads import training_runs
from tests.workloads.helpers import losses_by_step, sigterm_restored
from tests.workloads.training_runs import TrainerRun
from workloads.training import distill, train
from workloads.training.checkpoint import complete_checkpoints
from workloads.training.distributed import Topology
from workloads.training.lineage import read_run_record


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    """The shared two-rank tiny run (tests/workloads/training_runs.py): the teacher."""
    run = training_runs.ddp_run(tmp_path_factory)
    assert run.done.returncode == 0, run.output[-3000:]
    return run


# --- the loss ----------------------------------------------------------------------------


def _logits(seed: int, rows: int = 320) -> torch.Tensor:
    return torch.randn(2, 5, rows, generator=torch.Generator().manual_seed(seed))


def test_alpha_zero_is_the_cross_entropy_over_the_real_vocabulary() -> None:
    student, teacher = _logits(0), _logits(1)
    targets = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(2))
    loss, parts = distill.distillation_loss(student, teacher, targets, vocab_size=256, alpha=0.0)
    expected = F.cross_entropy(student[..., :256].reshape(-1, 256), targets.reshape(-1))
    assert torch.allclose(loss, expected) and torch.allclose(parts.hard, expected)
    assert float(parts.soft) == 0.0


def test_the_soft_loss_is_t_squared_kl_and_zero_for_the_teachers_own_logits() -> None:
    student, teacher = _logits(0), _logits(1)
    targets = torch.zeros(2, 5, dtype=torch.long)
    t = 3.0
    loss, parts = distill.distillation_loss(
        student, teacher, targets, vocab_size=256, temperature=t, alpha=1.0
    )
    p = F.softmax(teacher[..., :256] / t, dim=-1)
    kl = (p * (p.log() - F.log_softmax(student[..., :256] / t, dim=-1))).sum(-1).mean()
    assert math.isclose(float(loss), float(kl) * t * t, rel_tol=1e-5)
    assert float(parts.soft) > 0
    same, _ = distill.distillation_loss(teacher, teacher, targets, vocab_size=256, alpha=1.0)
    assert abs(float(same)) < 1e-6
    mixed, mixed_parts = distill.distillation_loss(
        student, teacher, targets, vocab_size=256, temperature=t, alpha=0.25
    )
    assert math.isclose(
        float(mixed), 0.25 * float(mixed_parts.soft) + 0.75 * float(mixed_parts.hard), rel_tol=1e-6
    )


def test_padded_logit_rows_do_not_count() -> None:
    student, teacher = _logits(0), _logits(1)
    targets = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(3))
    loss, _ = distill.distillation_loss(student, teacher, targets, vocab_size=256)
    student[..., 256:] += 50.0
    teacher[..., 256:] -= 50.0
    again, _ = distill.distillation_loss(student, teacher, targets, vocab_size=256)
    assert torch.allclose(loss, again)


def test_the_gradient_reaches_only_the_student() -> None:
    student = _logits(0).requires_grad_()
    teacher = _logits(1).requires_grad_()
    loss, _ = distill.distillation_loss(
        student, teacher.detach(), torch.zeros(2, 5, dtype=torch.long), vocab_size=256
    )
    loss.backward()  # type: ignore[no-untyped-call]
    assert student.grad is not None and float(student.grad[..., :256].abs().sum()) > 0
    assert float(student.grad[..., 256:].abs().sum()) == 0.0


# --- the command -------------------------------------------------------------------------


def test_distills_into_a_checkpoint_that_the_trainer_resumes(
    tmp_path: Path, ddp_run: TrainerRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "student"
    args = ["--teacher", str(ddp_run.ckpt), "--preset", "tiny", "--out", str(out)]
    args += ["--n-layer", "1", "--steps", "3", "--log-every", "1"]
    args += ["--log-jsonl", str(tmp_path / "distill.jsonl")]
    with sigterm_restored():
        assert distill.main(args) == distill.EXIT_OK
    printed = capsys.readouterr().out
    assert "teacher" in printed and "held-out loss teacher" in printed
    assert [s for s, _ in complete_checkpoints(out)] == [3]
    marker = json.loads((out / distill.DISTILL_RECORD).read_text())
    assert marker["source"] == str((ddp_run.ckpt / "step_00000016").resolve())
    assert marker["temperature"] == distill.DEFAULT_TEMPERATURE
    record = read_run_record(out)
    assert record is not None and record.config.model.n_layer == 1
    teacher_record = read_run_record(ddp_run.ckpt)
    assert teacher_record is not None
    assert record.config.data_dir == teacher_record.config.data_dir  # the teacher's data
    logged = [json.loads(line) for line in (tmp_path / "distill.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3]
    assert all(r["soft"] > 0 and r["hard"] > 0 for r in logged)
    # The checkpoint round trip: what was saved loads into the run record's model.
    source = distill.find_source(out)
    model = distill.load_source_model(source, torch.device("cpu"))
    assert model.config.n_layer == 1
    # `make train` on the same directory resumes it (hard labels from here on).
    config = record.config
    resumed = dataclasses.replace(config, steps=5, log_jsonl=str(tmp_path / "train.jsonl"))
    with sigterm_restored():
        assert train.run(resumed, Topology()) == train.EXIT_OK
    assert "resume: from" in capsys.readouterr().out
    assert sorted(losses_by_step(tmp_path / "train.jsonl")) == [4, 5]
    # The same distillation again resumes it: nothing left to do at step 3.
    with sigterm_restored():
        assert distill.main([*args[:6], "--n-layer", "1", "--steps", "5"]) == distill.EXIT_OK
    assert "already at step 5 of 5" in capsys.readouterr().out


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with sigterm_restored():
        assert distill.main(list(args)) == distill.EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_bad_teachers_are_one_line_each(
    tmp_path: Path, ddp_run: TrainerRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    missing = _refusal(capsys, "--teacher", str(tmp_path / "nope"), "--out", out)
    assert "no such directory" in missing
    (tmp_path / "empty").mkdir()
    empty = _refusal(capsys, "--teacher", str(tmp_path / "empty"), "--out", out)
    assert "holds no complete checkpoint" in empty
    # A teacher whose data file lost its end (a copy: the shared run stays whole).
    broken = tmp_path / "broken"
    shutil.copytree(ddp_run.ckpt, broken)
    step = broken / "step_00000016"
    data = max(step.glob("*.distcp"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:100])
    corrupt = _refusal(capsys, "--teacher", str(broken), "--n-layer", "1", "--out", out)
    assert "is corrupt" in corrupt and "truncated" in corrupt
    # No run record: the teacher's shapes and data are unknown.
    norecord = tmp_path / "norecord"
    shutil.copytree(ddp_run.ckpt, norecord)
    (norecord / "run.json").unlink()
    assert "has no run.json" in _refusal(capsys, "--teacher", str(norecord), "--out", out)
    assert not (tmp_path / "out").exists()


def test_bad_students_and_outputs_are_one_line_each(
    tmp_path: Path, ddp_run: TrainerRun, capsys: pytest.CaptureFixture[str]
) -> None:
    teacher = ["--teacher", str(ddp_run.ckpt), "--out", str(tmp_path / "out")]
    same = _refusal(capsys, *teacher, "--preset", "tiny")
    assert "is not smaller than the teacher" in same
    vocab = _refusal(capsys, *teacher, "--n-layer", "1", "--vocab-size", "512")
    assert "vocabulary (512) is not the teacher's (256)" in vocab
    longer = _refusal(
        capsys,
        *teacher,
        "--preset",
        "small",
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--seq-len",
        "200",
    )
    assert "longer than the teacher's context" in longer
    data = _refusal(capsys, *teacher, "--n-layer", "1", "--data-dir", str(tmp_path))
    assert "--data-dir is set by make distill" in data
    alpha = _refusal(capsys, *teacher, "--n-layer", "1", "--alpha", "1.5")
    assert "--alpha in [0, 1]" in alpha
    # Someone's folder is never written into.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    refused = _refusal(
        capsys, "--teacher", str(ddp_run.ckpt), "--out", str(foreign), "--n-layer", "1"
    )
    assert "not an earlier make distill output" in refused
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    inside = _refusal(
        capsys, "--teacher", str(ddp_run.ckpt), "--out", str(ddp_run.ckpt / "x"), "--n-layer", "1"
    )
    assert "overlaps the source checkpoint directory" in inside
    assert not (tmp_path / "out").exists()
