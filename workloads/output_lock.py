"""One writer per output directory, and the swap that puts its output in place.

`make data` and `make export` build their output in a hidden sibling of OUT and rename
it into place at the end; two runs to the same OUT would both succeed and the last
rename would silently replace the first run's announced output. `acquire` makes the
second run stop at once, naming the first.

The lock is the file ``<OUT>.lock`` beside OUT, held with ``flock`` for as long as the
run lasts and removed when it ends. The kernel drops an ``flock`` when its process ends
however it ends (a crash, SIGKILL, an OOM kill), so a lock file nobody holds is stale by
construction: no pid is guessed at, and a pid the system has since given to another
process cannot keep a stale lock alive. The file records who holds it (pid, host, start
time, command) for the message the second run prints, and for the run that takes over a
stale lock and says whose it was. Where the file system refuses ``flock`` (some network
mounts), the recorded pid decides instead: alive on this host, or recorded by another
host, counts as held.

`swap_into_place` replaces OUT by the finished output with two renames and no Ctrl-C
between them (an interrupt there would leave no OUT at all).

Standard library only: the data image and the lifecycle image both import it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

SUFFIX = ".lock"
#: How often a lock that vanished or was replaced while being taken is tried again.
_ATTEMPTS = 5


class OutputLockError(Exception):
    """OUT cannot be locked: another run holds it, or its folder cannot be written."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock: process id, host, start time (UTC), command."""

    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def me(cls) -> Holder:
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            command=" ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:300],
        )

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started}"


def lock_path(out: Path) -> Path:
    """The lock file of ``out``: beside it, never inside (OUT stays as the run leaves it)."""
    if out.name in ("", ".."):  # "." or "..": the folder's own name
        out = out.resolve()
    return out.with_name(out.name + SUFFIX)


def _read_holder(fd: int) -> Holder | None:
    """The holder recorded in the open lock file; None when empty or unreadable (a run
    that is only now writing it, or a file from elsewhere)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        body = json.loads(os.read(fd, 65536).decode("utf-8"))
        return Holder(
            int(body["pid"]), str(body["host"]), str(body["started"]), str(body["command"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _try_flock(fd: int) -> bool | None:
    """True locked, False held by another process, None when the file system has no
    ``flock``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP, ...: a file system without flock
        return None
    return True


@dataclass
class Lock:
    """A held lock; `release` removes the file and lets it go.

    Args:
        path: the lock file.
        previous: the holder of a stale lock this run took over, else None.
    """

    path: Path
    previous: Holder | None
    _fd: int

    def release(self) -> None:
        if self._fd < 0:
            return
        # Removed while still held, so no other run can take this file between the two.
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = -1


def acquire(out: Path, what: str, say: Callable[[str], None]) -> Lock:
    """Lock ``out`` for this process; `Lock.release` when done.

    Args:
        out: the output directory (absent or not); its folder must exist.
        what: how the messages name OUT to the user (``"OUT build/data/x"``).
        say: told, in one line, when a stale lock (of a run that ended without releasing
            it) is taken over.

    Raises:
        OutputLockError: another run holds the lock, or the lock file cannot be made.
    """
    path = lock_path(out)
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise OutputLockError(
                f"{what} cannot be written: the lock {path} cannot be created "
                f"({err.strerror}); choose an OUT in a folder you can write"
            ) from err
        try:
            locked = _try_flock(fd)
            recorded = _read_holder(fd)
            if locked is None:  # no flock on this file system: the recorded pid decides
                locked = recorded is None or (
                    recorded.host == socket.gethostname() and not _pid_alive(recorded.pid)
                )
            if not locked:
                who = recorded.describe() if recorded else "a run that is starting"
                raise OutputLockError(
                    f"{what} is being written by another run ({who}; lock {path}); wait "
                    "for it to end or choose another OUT"
                )
            if not _same_file(fd, path):
                os.close(fd)  # released and removed while we opened it: start again
                continue
            body = json.dumps(asdict(Holder.me())).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, body, 0)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        if recorded is not None:
            say(
                f"taking over the lock {path} of an earlier run that ended without "
                f"releasing it ({recorded.describe()})"
            )
        return Lock(path, recorded, fd)
    raise OutputLockError(f"{what}: the lock {path} keeps changing; try again")


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored for the block (in the main thread, where Python handles signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def swap_into_place(new: Path, out: Path) -> None:
    """Put the finished directory ``new`` (a sibling of ``out``: one file system) at
    ``out``: an earlier ``out`` is renamed aside, ``new`` renamed in (the earlier one
    renamed back if that fails), and only then is the earlier one deleted. A Ctrl-C
    during the two renames is ignored: the output is finished, and between them there
    would be no ``out`` at all."""
    with _no_interrupt():
        if not out.exists():
            new.rename(out)
            return
        aside = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
        out.rename(aside)
        try:
            new.rename(out)
        except BaseException:
            aside.rename(out)
            raise
    shutil.rmtree(aside, ignore_errors=True)
