"""The all-reduce bus-bandwidth check: its arithmetic, its thresholds, and a real run
across two gloo processes that passes at threshold 0 and fails above what it measured."""

from __future__ import annotations

import pytest

from tests.workloads.helpers import run_torchrun
from workloads.training import fabric_check


def test_bus_bandwidth_factor_is_nccl_tests_definition() -> None:
    assert fabric_check.bus_bandwidth_factor(2) == 1.0
    assert fabric_check.bus_bandwidth_factor(16) == pytest.approx(2 * 15 / 16)
    assert fabric_check.bus_bandwidth_factor(1) == 0.0


def test_thresholds_by_instance_type_and_explicit() -> None:
    assert fabric_check.threshold_for("p5en.48xlarge", None) == 200.0
    assert fabric_check.threshold_for("p5en.48xlarge", 0.0) == 0.0
    assert fabric_check.threshold_for("m5.large", None) is None


def test_unknown_instance_type_without_threshold_is_a_clear_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert fabric_check.main(["--instance-type", "m5.large"]) == 2
    err = capsys.readouterr().err
    assert "no bus-bandwidth threshold" in err and "p5en.48xlarge" in err


def test_world_of_one_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert fabric_check.main(["--min-busbw-gbps", "0"]) == 2
    assert "world of one" in capsys.readouterr().err


@pytest.mark.slow
def test_two_gloo_ranks_measure_and_gate_on_the_threshold() -> None:
    passed = run_torchrun(
        "workloads.fabric_check",
        ["--min-busbw-gbps", "0", "--sizes-mib", "1,4", "--iterations", "5"],
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "2 ranks on 1 node(s), gloo" in passed.stdout
    assert "busbw GB/s" in passed.stdout and "PASSED" in passed.stdout
    failed = run_torchrun(
        "workloads.fabric_check",
        ["--min-busbw-gbps", "100000", "--sizes-mib", "1", "--iterations", "3"],
    )
    assert failed.returncode != 0
    assert "FAILED: best busbw" in failed.stderr and "below the 100000.00 GB/s" in failed.stderr
