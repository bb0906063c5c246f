"""`python -m workloads.features <command>` run in the test's own process: the same
`main`, its output and exit status, without a second interpreter importing Feast, MLflow
and LightGBM again (seconds of CPU time each). What only a fresh process shows (the
exit status of ``python -m``, nothing on stderr but the one message) is checked by the
subprocess runs of test_cli_errors.py and of a missing label file."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess

from workloads.features.__main__ import main


def features(*args: str) -> subprocess.CompletedProcess[str]:
    """``main(args)``: its exit status and what it printed; the environment as it was
    before (the commands set defaults of their own in it)."""
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
