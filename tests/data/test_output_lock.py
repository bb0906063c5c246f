"""One writer per output directory (`workloads.output_lock`): a second holder is refused
naming the first, a lock left by a process that was killed is taken over saying whose
it was, a folder that cannot hold the lock is one message, and the swap of OUT is not
interrupted by Ctrl-C. The data job's and the export's use of it are tested with them
(tests/data/test_prepare.py, tests/workloads/test_lifecycle_export.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workloads import output_lock

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    said: list[str] = []
    first = output_lock.acquire(out, f"OUT {out}", said.append)
    lock = tmp_path / "out.lock"
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    # flock conflicts between two opens of the file, in one process as in two.
    with pytest.raises(output_lock.OutputLockError) as refused:
        output_lock.acquire(out, f"OUT {out}", said.append)
    assert str(refused.value).startswith(
        f"OUT {out} is being written by another run (pid {os.getpid()} on "
        f"{socket.gethostname()}, started "
    )
    assert f"lock {lock}); wait for it to end or choose another OUT" in str(refused.value)
    assert not out.exists()  # the lock is beside OUT, never in it
    first.release()
    assert not lock.exists()
    output_lock.acquire(out, f"OUT {out}", said.append).release()
    assert said == []  # nothing stale was taken over


def test_the_lock_of_a_killed_run_is_taken_over_saying_whose_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from workloads import output_lock; "
         "output_lock.acquire(Path(sys.argv[1]), 'OUT', print); print('held', flush=True); "
         "sys.stdin.read()", str(out)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    with pytest.raises(output_lock.OutputLockError, match=f"another run \\(pid {holder.pid} on"):
        output_lock.acquire(out, "OUT", print)
    holder.kill()  # as SIGKILL or the OOM killer end it: no clean-up
    holder.wait(timeout=30)
    assert (tmp_path / "out.lock").exists()
    said: list[str] = []
    lock = output_lock.acquire(out, f"OUT {out}", said.append)
    assert lock.previous is not None and lock.previous.pid == holder.pid
    assert said == [
        f"taking over the lock {tmp_path / 'out.lock'} of an earlier run that ended without "
        f"releasing it ({lock.previous.describe()})"
    ]
    assert json.loads((tmp_path / "out.lock").read_text())["pid"] == os.getpid()
    lock.release()


def test_without_flock_the_recorded_pid_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system without flock (some network mounts): a recorded pid that is alive
    here, or a lock recorded by another host, holds; a dead pid here is stale."""
    monkeypatch.setattr(output_lock, "_try_flock", lambda fd: None)
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    here = socket.gethostname()
    for pid, host, held in ((os.getpid(), here, True), (int(dead.stdout), here, False),
                            (int(dead.stdout), "elsewhere", True)):  # fmt: skip
        body = {"pid": pid, "host": host, "started": "2026-11-29T10:00:00Z", "command": "x"}
        (tmp_path / "out.lock").write_text(json.dumps(body))
        if held:
            with pytest.raises(output_lock.OutputLockError, match=f"pid {pid} on {host}"):
                output_lock.acquire(out, "OUT", print)
        else:
            said: list[str] = []
            output_lock.acquire(out, "OUT", said.append).release()
            assert len(said) == 1 and f"pid {pid} on {here}" in said[0]


def test_a_folder_that_cannot_hold_the_lock_is_one_message(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "out"
    with pytest.raises(output_lock.OutputLockError) as refused:
        output_lock.acquire(out, f"OUT {out}", print)
    assert str(refused.value) == (
        f"OUT {out} cannot be written: the lock {out}.lock cannot be created (Not a "
        "directory); choose an OUT in a folder you can write"
    )


def test_the_swap_replaces_out_and_ignores_ctrl_c_between_its_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, new = tmp_path / "out", tmp_path / ".out.tmp"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "old.bin").write_text("old")
    new.mkdir()
    (new / "new.bin").write_text("new")
    rename = Path.rename

    def interrupted_rename(self: Path, target: Path) -> Path:
        moved = rename(self, target)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after the first rename
        return moved

    handler = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(Path, "rename", interrupted_rename)
    output_lock.swap_into_place(new, out)  # no KeyboardInterrupt
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) is handler  # put back afterwards
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # nothing left aside
    assert [p.name for p in out.iterdir()] == ["new.bin"]
