"""The pipeline's ingest step (`workloads.data.ingest`): a copy of exactly the files the
Spark job reads, with a listing whose sizes and digests are the files'; an OUT that is
not absent or empty, or inside SOURCE, refused with nothing changed; a file that changes
while it is copied stops the step; user errors are one message, exit 2.

Run in the data environment (the Makefile's TESTS_data)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.data import ingest as step
from workloads.data.prepare import UserError, list_sources

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "raw"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("first document\nsecond document\n")
    (folder / "sub" / "b.jsonl").write_text('{"text": "a record"}\n')
    (folder / "notes.md").write_text("not read by the job\n")
    (folder / ".hidden.txt").write_text("hidden files are left out\n")
    return folder


def test_the_copy_is_what_the_job_reads_with_its_listing(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "snapshot"
    listing = step.ingest(source, out)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["a.txt", step.LISTING, "sub/b.jsonl"]
    assert [f["path"] for f in listing["files"]] == [s.relative for s in list_sources(source)]
    for entry in listing["files"]:
        data = (out / entry["path"]).read_bytes()
        assert data == (source / entry["path"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["bytes"] == len(data)
    assert json.loads((out / step.LISTING).read_text()) == listing
    assert listing["digest"] == step.listing_digest(listing["files"])
    # The job reads the copy as it read the source: the listing is no source file.
    assert [s.relative for s in list_sources(out)] == ["a.txt", "sub/b.jsonl"]
    assert not list(tmp_path.glob(".snapshot.tmp-*"))


def test_the_digest_follows_the_content(source: Path, tmp_path: Path) -> None:
    first = step.ingest(source, tmp_path / "one")["digest"]
    assert step.ingest(source, tmp_path / "two")["digest"] == first
    (source / "a.txt").write_text("first document\nchanged document\n")
    assert step.ingest(source, tmp_path / "three")["digest"] != first


def test_an_empty_out_is_taken(source: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    step.ingest(source, tmp_path / "empty")
    assert (tmp_path / "empty" / "a.txt").is_file()


@pytest.mark.parametrize("kind", ["file", "non-empty", "inside-source"])
def test_an_out_it_may_not_write_is_refused_and_left_alone(
    source: Path, tmp_path: Path, kind: str
) -> None:
    out = {
        "file": tmp_path / "a-file",
        "non-empty": tmp_path / "full",
        "inside-source": source / "copy",
    }[kind]
    if kind == "file":
        out.write_text("mine\n")
    elif kind == "non-empty":
        out.mkdir()
        (out / "keep.txt").write_text("mine\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(UserError, match="OUT"):
        step.ingest(source, out)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_a_file_that_changes_during_the_copy_stops_the_step(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = step.shutil.copyfile

    def copy_then_change(src: str, dst: str) -> str:
        result: str = real(src, dst)
        Path(dst).write_text("appended after listing\n")  # as if the source moved on
        return result

    monkeypatch.setattr(step.shutil, "copyfile", copy_then_change)
    with pytest.raises(UserError, match="changed while it was copied"):
        step.ingest(source, tmp_path / "snapshot")
    assert not (tmp_path / "snapshot").exists()
    assert not list(tmp_path.glob(".snapshot.tmp-*"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["{tmp}/missing", "--out", "{tmp}/o"], "does not exist"),
        (["{tmp}/only-md", "--out", "{tmp}/o"], "holds no .txt or .jsonl file"),
        (["{src}", "--out", "{src}/a.txt"], "is not an empty directory"),
        # A folder that cannot be made (under a file): one line, not an OSError's traceback.
        (["{src}", "--out", "{tmp}/only-md/x.md/o"], "cannot be written (File exists)"),
    ],
)
def test_user_errors_are_one_message(
    source: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    (tmp_path / "only-md").mkdir()
    (tmp_path / "only-md" / "x.md").write_text("x\n")
    argv = [a.format(tmp=tmp_path, src=source) for a in args]
    result = subprocess.run(
        [sys.executable, "-m", "workloads.data.ingest", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == step.EXIT_USER_ERROR
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ingest: ") and needle in lines[0], lines
    assert not (tmp_path / "o").exists()
