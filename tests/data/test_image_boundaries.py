"""What the data image can import: no torch and no MLflow. Each command runs here in a
subprocess where importing them fails (tests/support/blocking.py); the trainer's side of
the boundary is tests/workloads/test_trainer_image_boundary.py."""

from __future__ import annotations

from tests.support.blocking import run_blocking

NOT_IN_DATA_IMAGE = ("torch", "mlflow")


def test_the_data_job_imports_no_torch() -> None:
    result = run_blocking(NOT_IN_DATA_IMAGE, "workloads.data.prepare", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--no-anonymise" in result.stdout
    for module in ("workloads.data.pii_eval", "workloads.data.make_pii_sample"):
        assert run_blocking(NOT_IN_DATA_IMAGE, module, "--help").returncode == 0


def test_the_blocker_blocks() -> None:
    result = run_blocking(("torch",), "-c", "import workloads.data.shards")
    assert result.returncode != 0 and "torch is blocked" in result.stderr
