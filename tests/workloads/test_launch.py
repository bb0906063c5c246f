"""`make train` checks its config once, before torchrun starts any worker."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.workloads import training_runs
from tests.workloads.helpers import run_in_repo
from tests.workloads.training_runs import TrainerRun
from workloads.data.byte_tokenizer import ensure_shards, tokenize_files
from workloads.data.manifest import describe_shards, write_manifest
from workloads.data.shard_format import ShardError, data_dir_problem
from workloads.training import checkpoint, launch
from workloads.training.config import DEFAULT_CORPUS


def problems(*argv: str) -> str:
    checked = launch.check(argv)
    assert isinstance(checked, str), checked
    return checked


def checked(*argv: str) -> launch.Launch:
    result = launch.check(argv)
    assert isinstance(result, launch.Launch), result
    return result


def test_a_valid_command_line_goes_to_torchrun_unchanged(tmp_path: Path) -> None:
    args = ["--preset", "tiny", "--steps", "3", "--ckpt-dir", str(tmp_path / "new" / "ckpt")]
    run = checked("--nproc", "3", "--", *args)
    # Only the metrics endpoint's address is added: this machine only, unless named.
    assert (run.nproc, run.train_args) == (3, [*args, "--metrics-host", "127.0.0.1"])
    assert run.config.steps == 3 and launch.preflight(run) is None
    named = checked("--", *args, "--metrics-host", "0.0.0.0")
    assert named.train_args == [*args, "--metrics-host", "0.0.0.0"]
    command = launch.torchrun_argv(3, args)
    assert command[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=3"]  # fmt: skip
    assert command[5:] == ["-m", "workloads.train", *args]


def test_every_problem_is_named_in_one_message() -> None:
    message = problems("--nproc", "0", "--", "--preset", "huge", "--bogus", "1")
    assert message.splitlines() == [
        "make train: 3 problems:",
        "  - NPROC (--nproc): got '0'; use a whole number of worker processes from 1 to 256 "
        "(e.g. NPROC=2)",
        "  - unknown arguments: --bogus 1 (see `make train ARGS=--help`)",
        "  - --preset: got 'huge'; one of tiny, small, gpt2-124m, gpt2-350m",
    ]


@pytest.mark.parametrize("nproc", ["0", "-1", "two", "1000"])
def test_bad_worker_counts(nproc: str) -> None:
    assert f"NPROC (--nproc): got '{nproc}'" in problems("--nproc", nproc, "--")


def test_bad_values_of_the_preset_are_refused() -> None:
    message = problems("--", "--preset", "tiny", "--steps", "-1", "--dtype", "fp8")
    assert "--steps: got " in message and "--dtype: got 'fp8'" in message


def test_a_checkpoint_directory_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "ckpt"
    blocker.write_text("")
    assert problems("--", "--ckpt-dir", str(blocker)) == (
        "make train: 1 problem:\n"
        f"  - --ckpt-dir: got '{blocker}'; exists and is not a directory; point it at a directory"
    )
    assert "is not a directory" in problems("--", "--ckpt-dir", str(blocker / "below"))
    assert "--data-dir: got" in problems("--", "--data-dir", str(blocker))
    assert "--metrics-host: got 'localhost'" in problems("--", "--metrics-host", "localhost")
    assert "--log-jsonl: got" in problems("--", "--log-jsonl", str(tmp_path))
    assert "--corpus: got" in problems("--", "--corpus", str(tmp_path / "missing.txt"))


def test_the_cli_prints_once_and_starts_no_worker(tmp_path: Path) -> None:
    blocker = tmp_path / "ckpt"
    blocker.write_text("")
    done = run_in_repo(
        [sys.executable, "-m", "workloads.training.launch", "--nproc", "2", "--",
         "--ckpt-dir", str(blocker), "--preset", "nope"],
        timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("make train: 2 problems:") == 1
    assert "Traceback" not in done.stderr and "torch.distributed" not in done.stderr


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    """Two ranks started through the launcher (shared with other tests)."""
    return training_runs.ddp_run(tmp_path_factory)


@pytest.mark.slow
def test_a_valid_run_is_handed_to_torchrun(ddp_run: TrainerRun) -> None:
    assert ddp_run.command[:5] == (sys.executable, "-m", "workloads.training.launch", "--nproc",
                                   "2")  # fmt: skip
    done = ddp_run.done
    assert done.returncode == 0, done.stdout + done.stderr
    assert "world 2 (1 node(s))" in done.stdout


def test_a_named_data_directory_without_shards_is_refused_and_left_alone(tmp_path: Path) -> None:
    """No silent fallback to the bundled corpus, and nothing written into the folder."""
    text = tmp_path / "text"
    text.mkdir()
    (text / "notes.txt").write_text("some text of the user's\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    expected = {
        tmp_path / "missing": "does not exist; make a dataset there",
        tmp_path / "empty": "is empty; make a dataset there",
        text: f"holds no token shards (train_*.bin); if it holds text, make a dataset of it "
        f"(`make data SOURCE={text} OUT=<new dir>`)",
    }
    for folder, reason in expected.items():
        problem = launch.preflight(checked("--", "--data-dir", str(folder)))
        assert problem is not None and problem.startswith(f"the data directory {folder} {reason}")
        assert problem.endswith("; or leave --data-dir out to train on the bundled corpus")
    assert not (tmp_path / "missing").exists() and not any((tmp_path / "empty").iterdir())
    # Named together with --corpus, a missing or empty directory is that corpus's output;
    # a folder holding other files is still not written into.
    corpus = ("--corpus", str(text / "notes.txt"))
    assert launch.preflight(checked("--", "--data-dir", str(tmp_path / "new"), *corpus)) is None
    assert "holds no token shards" in str(
        launch.preflight(checked("--", "--data-dir", str(text), *corpus))
    )
    # The trainer itself (a pod's --data-dir on its scratch volume) fills only an absent
    # or empty directory from the corpus, never someone's folder.
    with pytest.raises(ShardError, match="holds no token shards"):
        ensure_shards(text, DEFAULT_CORPUS)
    assert [p.name for p in text.iterdir()] == ["notes.txt"]


def test_the_cli_refuses_a_folder_of_text_at_once(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("text\n", encoding="utf-8")
    done = run_in_repo(
        [sys.executable, "-m", "workloads.training.launch", "--", "--data-dir", str(tmp_path)],
        timeout_s=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"make train: the data directory {tmp_path} holds no token")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_the_data_is_checked_before_any_worker_starts(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("the launcher reads every shard's header. " * 1500, encoding="utf-8")
    data = tmp_path / "data"
    tokenize_files([text], data, shard_tokens=20_000)  # train shards of 20000 tokens
    write_manifest(data, {"name": "t", "shards": describe_shards(data)})
    run = checked("--nproc", "2", "--", "--data-dir", str(data))
    assert launch.preflight(run) is None
    # Too small for one step of every rank: 8 ranks x 16 x 256 tokens + 1.
    big = checked("--nproc", "8", "--", "--data-dir", str(data), "--seq-len", "128",
                  "--micro-batch-size", "32")  # fmt: skip
    assert "fewer than one step needs (32769 = 8 ranks x 32 x 128 + 1)" in str(
        launch.preflight(big)
    )
    shard = data / "train_000001.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    problem = str(launch.preflight(run))
    assert "does not match its manifest.json" in problem
    assert "shard train_000001.bin changed: " in problem
    # Without a manifest, a cut shard is named as truncated.
    (data / "manifest.json").unlink()
    problem = str(launch.preflight(run))
    assert f"{shard}: header says" in problem and "it is truncated or corrupt" in problem


@pytest.fixture
def checkpoints(tmp_path: Path, ddp_run: TrainerRun) -> Path:
    """A copy of the shared DDP run's checkpoints (steps 12 and 16, tiny preset)."""
    assert ddp_run.done.returncode == 0, ddp_run.output
    return Path(shutil.copytree(ddp_run.ckpt, tmp_path / "ckpt"))


@pytest.mark.slow
def test_the_checkpoint_is_checked_before_any_worker_starts(checkpoints: Path) -> None:
    def preflight(*extra: str) -> str | None:
        return launch.preflight(checked("--", "--ckpt-dir", str(checkpoints), *extra))

    newest, previous = checkpoints / "step_00000016", checkpoints / "step_00000012"
    assert preflight() is None
    assert preflight("--n-embd", "32") == (
        f"checkpoint {newest} does not fit this run (a different preset or model shape?): "
        "it has model.wte.weight of shape [256, 64], this run [256, 32]. Point --ckpt-dir at "
        "a new directory to start fresh."
    )
    assert str(preflight("--engine", "deepspeed")).startswith(
        f"checkpoint {newest} was written by the torch engine (DCP)"
    )
    # A corrupt newest checkpoint is no refusal: the run resumes from the one before it.
    (newest / ".metadata").write_bytes(b"not a pickle")
    point = checkpoint.resume_point(checkpoints)
    assert point is not None and point.path == previous
    assert point.skipped[0].startswith(
        f"checkpoint {newest} is corrupt: its .metadata cannot be read"
    )
    assert preflight() is None and newest.is_dir()  # the launcher only looks
    # A cut data file is named as truncated; with none readable left, the run is refused.
    data_file = next(previous.glob("*.distcp"))
    data_file.write_bytes(data_file.read_bytes()[:100])
    problem = str(preflight())
    assert problem.startswith(f"no checkpoint in {checkpoints} can be resumed: ")
    assert (
        f"checkpoint {previous} is corrupt: its data file {data_file.name} is truncated (100 bytes"
        in problem
    )
    assert "EOFError" not in problem and "does not fit" not in problem


def test_a_directory_another_rank_is_filling_is_filled_not_refused(tmp_path: Path) -> None:
    """Nodes that share a data directory race to tokenise the corpus into it: one that
    finds only the other's temporary shard files fills it too (the writes are atomic
    and identical), where it once refused a "folder without shards"."""
    data = tmp_path / "data"
    data.mkdir()
    (data / ".train_000000.bin.123.tmp").write_bytes(b"half a shard")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("text to train on, " * 20, encoding="utf-8")
    assert data_dir_problem(data, fill_from=str(corpus)) is None
    assert [p.name for p in ensure_shards(data, corpus)] == ["train_000000.bin"]
    (data / "notes.txt").write_text("the user's", encoding="utf-8")
    for shard in data.glob("*.bin"):
        shard.unlink()
    assert "holds no token shards" in str(data_dir_problem(data, fill_from=str(corpus)))
