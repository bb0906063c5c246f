"""`python -m workloads.features`: every user error is one message naming what to fix,
exit status 2, no traceback, and nothing it did not make is touched."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.features.in_process import features as in_process
from tests.workloads.helpers import free_port
from workloads.features.__main__ import MIN_WEEKS

ROOT = Path(__file__).resolve().parents[2]


def features(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads.features", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 12


def test_a_directory_it_did_not_make_is_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / "someone-elses"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = features("run", "--workdir", str(mine), "--customers", "50")
    assert_user_error(result, "was not made by this command")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_file_as_the_working_directory(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    assert_user_error(features("run", "--workdir", str(path)), "is a file")


def test_materialize_before_run_says_what_to_do(tmp_path: Path) -> None:
    assert_user_error(
        features("materialize", "--workdir", str(tmp_path / "nothing")), "run `make features`"
    )


def test_bench_before_run_says_what_to_do(tmp_path: Path) -> None:
    assert_user_error(
        features("bench", "--workdir", str(tmp_path / "nothing")), "run `make features`"
    )


def test_serve_without_a_model_says_which_directory(tmp_path: Path) -> None:
    result = features("serve", "--model-dir", str(tmp_path), "--port", str(free_port()))
    assert_user_error(result, "has neither model_card.json nor MLmodel")


def test_serve_with_an_unapplied_repository(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_card.json").write_text('{"features": ["a"]}')
    (model / "model.onnx").write_bytes(b"")
    result = features("serve", "--model-dir", str(model), "--port", str(free_port()))
    assert_user_error(result, "the model takes ['a']")


def test_a_bad_port(tmp_path: Path) -> None:
    assert_user_error(
        features("serve", "--model-dir", str(tmp_path), "--port", "70000"), "--port must be"
    )


def _refused(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    """One line on stderr, ``features: <what to fix>``, exit status 2."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("features: "), result.stderr
    assert fragment in lines[0], lines[0]


def test_a_taken_port_is_refused_before_any_work(tmp_path: Path) -> None:
    """`make features PORT=<taken>`: one line at once, nothing written (before, the run
    trained and registered a version, then failed to serve)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = features("run", "--workdir", str(tmp_path / "work"), "--port", str(port))
    _refused(result, f"cannot listen on 127.0.0.1:{port}")
    assert "PORT=" in result.stderr
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--customers", "0"], "--customers must be at least 1, got 0"),
        (["--weeks", "5", "--threads", "0"],
         "--weeks must be at least 6, got 5; --threads must be at least 1, got 0"),
        (["--seed", "-1"], "--seed must be at least 0, got -1"),
        (["--port", "70000"], "--port must be in 1-65535 (0: a free one), got 70000"),
        (["--tracking-uri", "not-a-url"], "the tracking URI 'not-a-url' is not a URI"),
        (["--tracking-uri", "sqlite:///{tmp}/missing/m.db"], "/missing is missing"),
        (["--tracking-uri", "http://127.0.0.1:{free}"], "no MLflow tracking server answers"),
    ],
)  # fmt: skip
def test_bad_arguments_of_run_are_one_line_and_nothing_is_written(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    """Every argument is checked before the working directory is made and before the
    slow imports (in this process: `main`, as `python -m` runs it)."""
    args = [a.replace("{free}", str(free_port())).replace("{tmp}", str(tmp_path)) for a in args]
    _refused(in_process("run", "--workdir", str(tmp_path / "work"), *args), fragment)
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["bench", "--workdir", "{w}", "--requests", "0"], "--requests must be at least 1"),
        (["serve", "--model-dir", "{w}", "--threads", "-1"], "--threads must be at least 0"),
        (["serve", "--model-dir", "{w}", "--timeout-s", "0"], "--timeout-s must be above 0"),
        (["publish", "--offline-uri", "{w}", "--customers", "0"], "--customers must be at least 1"),
        (["train", "--offline-uri", "{w}", "--tracking-uri", "http://x", "--workdir", "{w}",
          "--threads", "0"], "--threads must be at least 1"),
        (["train", "--offline-uri", "{w}", "--tracking-uri", "not-a-url", "--workdir", "{w}"],
         "is not a URI"),
    ],
)  # fmt: skip
def test_bad_arguments_of_the_other_commands(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    where = str(tmp_path / "w")
    _refused(in_process(*(a.replace("{w}", where) for a in args)), fragment)
    assert not (tmp_path / "w").exists()


def test_the_weeks_the_command_takes_are_those_the_generator_takes() -> None:
    from workloads.features import data  # noqa: PLC0415

    assert len(data.generate(customers=1, weeks=MIN_WEEKS).activity) > 0
    with pytest.raises(ValueError, match="6 weeks"):
        data.generate(customers=1, weeks=MIN_WEEKS - 1)


def make_dry(*args: str) -> subprocess.CompletedProcess[str]:
    """``make -n <args>``: what the verb would run (nothing runs)."""
    return subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_make_features_takes_the_working_directory_the_docs_name(tmp_path: Path) -> None:
    """WORKDIR= (docs/features.md, the command's messages) is what make passes as
    --workdir; FEATURES_DIR=, the earlier name, is refused rather than ignored."""
    assert "`WORKDIR=`: the working directory" in (ROOT / "docs" / "features.md").read_text()
    for verb in ("features", "bench-features"):
        dry = make_dry(verb, f"WORKDIR={tmp_path}/w")
        assert dry.returncode == 0, dry.stderr
        assert f"--workdir '{tmp_path}/w'" in dry.stdout, dry.stdout
        old = make_dry(verb, f"FEATURES_DIR={tmp_path}/w")
        assert old.returncode == 2
        assert f"give the working directory as WORKDIR={tmp_path}/w" in old.stderr, old.stderr
        assert "--workdir" not in old.stdout
