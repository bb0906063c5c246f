"""`python -m workloads.features`: every user error is one message naming what to fix,
exit status 2, no traceback, and nothing it did not make is touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    result = features("serve", "--model-dir", str(tmp_path), "--port", "18080")
    assert_user_error(result, "has neither model_card.json nor MLmodel")


def test_serve_with_an_unapplied_repository(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_card.json").write_text('{"features": ["a"]}')
    (model / "model.onnx").write_bytes(b"")
    result = features("serve", "--model-dir", str(model), "--port", "18080")
    assert_user_error(result, "the model takes ['a']")


def test_a_bad_port(tmp_path: Path) -> None:
    assert_user_error(
        features("serve", "--model-dir", str(tmp_path), "--port", "70000"), "--port must be"
    )
