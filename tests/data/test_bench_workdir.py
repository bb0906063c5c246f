"""`make bench-data` clears its work folder before each run: only a folder it made."""

from __future__ import annotations

from pathlib import Path

from workloads.data import bench


def test_a_folder_the_bench_did_not_make_is_refused_and_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(notes)
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    for work in (notes, link, a_file):
        assert "was not made by this bench" in bench._workdir_problem(work)
    assert bench.main(["--workdir", str(notes), "--mb", "0.01"]) == 2
    assert [p.name for p in notes.iterdir()] == ["a.txt"]


def test_its_own_folder_is_cleared_and_a_new_one_made(tmp_path: Path) -> None:
    work = tmp_path / "bench"
    assert bench._workdir_problem(work) == ""
    assert bench._claim_workdir(work) == ""
    (work / "corpus").mkdir()
    assert bench._workdir_problem(work) == ""  # made by the bench: its marker is there
    assert bench._claim_workdir(work) == ""
    assert [p.name for p in work.iterdir()] == [bench.WORKDIR_MARKER]


def test_a_builder_python_that_is_not_there_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-python")
    assert missing in bench._builder_problem(missing)
    assert bench._builder_problem("python3") == ""
