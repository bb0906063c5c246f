"""Elastic training on CPU: two torchrun agents ("nodes") join one c10d rendezvous with
``--nnodes 1:2``; one node is lost mid-run (its worker SIGKILLs its agent, then
itself); the other agent restarts its worker, which goes on alone from the last
checkpoint with twice the gradient accumulation, so the loss stays on the curve of
an uninterrupted two-rank run."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from torch.distributed.run import config_from_args, get_args_parser

from tests.workloads import training_runs
from tests.workloads.helpers import (
    REPO_ROOT,
    TORCHRUN,
    free_port,
    losses_by_step,
    read_log,
    torchrun_env,
)
from tests.workloads.training_runs import TrainerRun

pytestmark = pytest.mark.slow

STEPS = training_runs.DDP_STEPS


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    """The uninterrupted two-rank run on the same arguments (shared with other tests)."""
    return training_runs.ddp_run(tmp_path_factory)


def elastic_agent(port: int, args: list[str]) -> list[str]:
    """One node of an elastic job: 1 to 2 nodes, one worker each, c10d rendezvous."""
    return [
        str(TORCHRUN),
        "--nnodes=1:2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--rdzv_id=elastic-test",
        "--max_restarts=2",
        "--monitor_interval=0.5",
        # Both nodes join the first round; after the loss, the survivor does not wait
        # long for a node that will not come back.
        "--rdzv_conf=last_call_timeout=3,join_timeout=120",
        "-m",
        "workloads.train",
        *args,
    ]


def test_losing_a_node_continues_from_the_checkpoint_on_the_same_curve(
    tmp_path: Path, ddp_run: TrainerRun
) -> None:
    elastic_dir = tmp_path / "elastic"
    assert ddp_run.done.returncode == 0, ddp_run.output
    expected = losses_by_step(ddp_run.log)

    # The shared run's arguments (a checkpoint every 4 steps) in elastic_dir, and:
    args = training_runs.ddp_args(
        elastic_dir,
        # Blocking saves: the step-4 checkpoint is complete when the node is lost.
        "--async-ckpt",
        "off",
        "--fault-kill-rank",
        "1",
        "--fault-kill-at-step",
        "6",
        "--fault-kill-node",
        "on",
    )
    port = free_port()
    env = torchrun_env()
    # The first agent hosts the rendezvous store (the survivor); the second joins it.
    survivor = subprocess.Popen(
        elastic_agent(port, args),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(1.0)
    lost = subprocess.Popen(
        elastic_agent(port, args),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        survivor_out, _ = survivor.communicate(timeout=300)
        lost_out, _ = lost.communicate(timeout=60)
    finally:
        for process in (survivor, lost):
            if process.poll() is None:
                process.kill()
    assert lost.returncode == -9, lost_out  # the lost node's agent was SIGKILLed
    assert "SIGKILL of this node's agent" in lost_out
    assert survivor.returncode == 0, survivor_out
    assert "world 2 (2 node(s))" in survivor_out
    assert "resume: from" in survivor_out and "at step 4" in survivor_out
    assert "elastic: world 1: grad accumulation 1 -> 2 keeps the global batch of 32" in (
        survivor_out
    )
    assert "16 seq x 64 tokens x 2 accum x 1 ranks" in survivor_out

    records = read_log(elastic_dir / "log.jsonl")
    before = [r for r in records if r["restart"] == 0]
    after = [r for r in records if r["restart"] != 0]
    assert before and {r["world_size"] for r in before} == {2}
    assert {r["world_size"] for r in after} == {1}
    assert {r["grad_accum_steps"] for r in after} == {2}
    assert [r["step"] for r in after] == list(range(5, STEPS + 1))
    # Before the loss: the same two-rank run. After it: one rank, two micro-steps, the
    # same tokens per step; equal up to the order of the float sums.
    for record in records:
        step = int(str(record["step"]))
        assert float(str(record["loss"])) == pytest.approx(expected[step], rel=1e-4), record
    assert float(str(after[-1]["loss"])) < float(str(before[0]["loss"])) - 1.0


def test_a_trainjobs_node_range_overrides_the_node_count_trainer_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kubeflow Trainer v2.3.0 sets ``PET_NNODES`` to a TrainJob's ``numNodes`` (the
    maximum); an elastic TrainJob gives ``--nnodes=MIN:MAX`` on torchrun's command line
    (`modules.k8s.trainer.training_job.manifests.elastic_args`), which torchrun takes
    over the variable."""
    trainer_env = {
        "PET_NNODES": "4",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "job-node-0-0.job",
        "PET_MASTER_PORT": "29500",
    }
    for name, value in trainer_env.items():
        monkeypatch.setenv(name, value)
    rendezvous = ["--rdzv_backend=c10d", "--rdzv_endpoint=job-node-0-0.job:29500"]
    elastic = ["--nnodes=2:4", *rendezvous, "--rdzv_id=team-job", "--max_restarts=3"]
    args = get_args_parser().parse_args([*elastic, "-m", "workloads.train"])
    config, _, _ = config_from_args(args)
    assert (config.min_nodes, config.max_nodes, config.max_restarts) == (2, 4, 3)
    fixed = get_args_parser().parse_args([*rendezvous, "-m", "workloads.train"])
    assert fixed.nnodes == "4"
