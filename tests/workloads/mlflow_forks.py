"""MLflow's client in fresh processes configured only by their environment, without
paying MLflow's import in each.

`Forks` starts one Python process (this file as a script) that imports MLflow once,
with no ``MLFLOW_*`` variable set, and then forks a child per snippet. The child's
environment is replaced by the snippet's before the snippet runs; MLflow reads its
settings (server, credentials, CA, retries, experiment) from the environment when a
client or run is made, not at import, so the child is configured by that environment
alone, as a new interpreter would be. A new interpreter per snippet costs ~4 s of CPU
for MLflow's import; a fork costs next to nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import IO


class Forks:
    """The forking process; `run` one snippet at a time, `close` at the end."""

    def __init__(self, base_env: dict[str, str]) -> None:
        """``base_env``: the environment every child starts from (no ``MLFLOW_*``)."""
        self.base_env = base_env
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=base_env,
            text=True,
        )

    def run(self, env: dict[str, str], code: str, timeout_s: int = 180) -> tuple[int, str, str]:
        """Run ``code`` in a child whose environment is ``base_env`` with ``env``;
        its exit status, stdout and stderr. A child still running after ``timeout_s``
        is killed (status -SIGALRM)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        request = {"env": {**self.base_env, **env}, "code": code, "timeout_s": timeout_s}
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process ended (status {self.process.wait()})")
        reply = json.loads(line)
        return int(reply["returncode"]), str(reply["stdout"]), str(reply["stderr"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


def _child(request: dict[str, object], out: IO[str], err: IO[str]) -> int:
    """In the forked child: the snippet's environment and output files, then the snippet."""
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    import signal  # noqa: PLC0415

    signal.alarm(int(str(request["timeout_s"])))
    try:
        exec(compile(str(request["code"]), "<snippet>", "exec"), {"__name__": "__main__"})
    except SystemExit as stop:  # as the interpreter's exit status for sys.exit()
        return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _serve() -> None:
    """The forking process: one JSON request per line in, one JSON reply per line out."""
    import mlflow  # noqa: F401, PLC0415 - imported once, before any fork

    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryDirectory() as scratch:
            paths = Path(scratch, "stdout"), Path(scratch, "stderr")
            with paths[0].open("w") as out, paths[1].open("w") as err:
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    status = 1
                    try:
                        status = _child(request, out, err)
                    finally:
                        sys.stdout.flush()
                        sys.stderr.flush()
                        os._exit(status)
                _, wait_status = os.waitpid(pid, 0)
            reply = {
                "returncode": os.waitstatus_to_exitcode(wait_status),
                "stdout": paths[0].read_text(),
                "stderr": paths[1].read_text(),
            }
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _serve()
