"""How the trainer's ranks tell `make train`'s launcher how the run ended.

The launcher (`workloads.training.launch`) sends every rank's stderr (and torchrun's) to
a log file, so that a refusal is not buried under each rank's traceback and torchrun's
``ChildFailedError``. A rank that refuses the run (bad data, a checkpoint that does not
fit) or stops on a signal leaves its one message and exit status in the file the
launcher names in `REPORT_ENV`; the launcher prints that message and exits with that
status. Standard library only: the launcher does not import torch to read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: The environment variable naming the report file (set by the launcher only).
REPORT_ENV = "TRAIN_REPORT_FILE"


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its exit status and the one message that says so."""

    status: int
    message: str


def report(status: int, message: str) -> None:
    """Leave ``message`` and ``status`` for the launcher, when it asked for them. The first
    rank to report is kept: the others report the same refusal, or its consequence."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    try:
        with open(path, "x", encoding="utf-8") as handle:
            json.dump({"status": status, "message": message}, handle)
    except FileExistsError:
        pass


def read_report(path: Path) -> Outcome | None:
    """The outcome a rank left in ``path``; None when none did (or it is unreadable:
    a rank killed while writing it)."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return Outcome(int(body["status"]), str(body["message"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
