"""The training job's layout and memory plan at plan time: ``tp`` inside a node, and a
job whose estimate does not fit its pool's GPUs refused with the numbers and a layout
that fits (`modules.k8s.trainer.memory`; its estimate is checked against measured
memory in tests/workloads/test_memory_plan.py)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from modules.k8s.trainer import memory
from modules.k8s.trainer.training_job.manifests import workload_args
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from modules.validation import InvalidArgsError
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations
from tests.k8s.fixtures import IB
from workloads.training.config import preset

#: One L4 per node (g6.xlarge: 22 GiB as the instance-type data gives it in whole GiB).
L4 = dataclasses.replace(IB, name="l4", gpus_per_node=1, accelerator="nvidia-l4", gpu_memory_gib=22)


def job(**changes: Any) -> TrainingJobSpec:
    fields: dict[str, Any] = {
        "name": "lm",
        "namespace": "team-a",
        "pool": IB,
        "local_queue": "team-a-queue",
        "priority_class": "research",
        "service_account": "team-a-training",
        "image": "registry.example/training:0.1.0",
        "checkpoint_claim": "fsx-checkpoints",
        "preset": "gpt2-124m",
    }
    return TrainingJobSpec(**(fields | changes))


def test_tp_runs_inside_a_node_and_reaches_the_trainer() -> None:
    spec = job(tp=4, nodes=2)
    assert "--tp=4" in workload_args(spec)
    assert "--tp=4" not in workload_args(job())
    with pytest.raises(InvalidArgsError) as err:
        job(tp=3)
    (problem,) = err.value.problems
    assert problem.field == "tp"
    assert "a divisor of pool gpu-ib's GPUs per node (8): TP runs inside a node" in problem.expected
    with pytest.raises(InvalidArgsError) as err:
        job(tp=2, framework="deepspeed")
    assert "1 with framework deepspeed" in err.value.problems[0].expected
    # The trainer's own rule (whole heads per rank) through its config: 16 heads, tp 8 ok.
    assert job(preset="gpt2-350m", tp=8).tp == 8


def test_a_job_that_does_not_fit_is_refused_with_the_numbers_and_a_layout_that_does() -> None:
    with pytest.raises(InvalidArgsError) as err:
        job(pool=L4, preset="gpt2-350m")
    (problem,) = err.value.problems
    assert problem.field == "preset"
    text = problem.expected
    assert "needs about 22.9 GiB per GPU (weights 1.3, gradients 1.3, optimizer 2.6," in text
    assert "pool l4 (nvidia-l4) has 22 GiB per GPU, of which a plan may use 18.3" in text
    assert "trainer arguments: --micro-batch-size 16 --activation-checkpointing on" in text
    # The layout it names is one the plan accepts.
    flags = text.rsplit("trainer arguments: ", 1)[1]
    assert job(pool=L4, preset="gpt2-350m", extra_args=tuple(shlex.split(flags))).preset


def test_the_estimate_counts_what_each_layout_shards() -> None:
    dims = memory.ModelDims.from_model_config(preset("gpt2-350m").model)
    base = memory.Layout(gpus=8, strategy="ddp", tp=1, micro_batch=8, seq_len=1024, bf16=True)
    ddp = memory.estimate(dims, base)
    fsdp = memory.estimate(dims, dataclasses.replace(base, strategy="fsdp2"))
    zero1 = memory.estimate(dims, dataclasses.replace(base, strategy="zero1"))
    tp8 = memory.estimate(dims, dataclasses.replace(base, tp=8))
    assert ddp.optimizer == 8 * fsdp.optimizer == 8 * zero1.optimizer
    assert ddp.gradients == 2 * 4 * dims.params()  # gradients and DDP's buckets
    assert zero1.gradients == 4 * dims.params()  # ZeRO-1 shards only the optimizer
    assert fsdp.weights < ddp.weights / 4
    # The blocks' activations are split by tp; the gathered logits (3.3 GB here) are not.
    assert tp8.activations < ddp.activations / 2
    checkpointed = dataclasses.replace(base, activation_checkpointing=True)
    assert memory.estimate(dims, checkpointed).activations < ddp.activations / 2


def test_hugging_face_configs_give_the_published_parameter_counts() -> None:
    gpt2 = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257}
    assert memory.ModelDims.from_hf_config(gpt2).params() == 124_439_808  # GPT-2 small
    llama2_7b = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    assert memory.ModelDims.from_hf_config(llama2_7b).params() == 6_738_415_616
    with pytest.raises(ValueError, match="hidden_size, n_embd, d_model"):
        memory.ModelDims.from_hf_config({"vocab_size": 3})


def test_make_plan_refuses_an_example_job_too_large_for_its_pool() -> None:
    """uae-dev's example job on its one-L4 nodes with gpt2-350m: the plan stops with the
    estimate and a layout that fits (as quotas beyond a pool's capacity stop it)."""
    config, secret_keys = load_stack_file("uae-dev")
    raw = config["uae-gpu-platform:exampleJob"]
    example = json.loads(raw) if isinstance(raw, str) else dict(raw)
    config["uae-gpu-platform:exampleJob"] = json.dumps(example | {"preset": "gpt2-350m"})
    with pytest.raises(PlanError) as err:
        plan_registrations("uae-dev", config, secret_keys)
    message = str(err.value)
    assert "exampleJob (preset): got 'gpt2-350m'" in message
    assert "needs about 22.9 GiB per GPU" in message and "this layout fits:" in message


def test_an_elastic_job_is_planned_on_its_fewest_nodes() -> None:
    """FSDP2 shards over every GPU: on ``min_nodes`` each GPU holds more, so that is
    what must fit (gpt2-350m: 1.1 GiB per GPU on 32 GPUs, 1.6 GiB on 8)."""
    small_gpus = dataclasses.replace(IB, gpu_memory_gib=3, max_size=4)  # a plan may use 1.2
    args = ("--parallelism", "fsdp2", "--activation-checkpointing", "on", "--micro-batch-size", "1")
    fixed = job(pool=small_gpus, preset="gpt2-350m", nodes=4, extra_args=args)
    assert fixed.nodes == 4
    with pytest.raises(InvalidArgsError) as err:
        job(pool=small_gpus, preset="gpt2-350m", nodes=4, min_nodes=1, extra_args=args)
    assert "(8 GPU(s), fsdp2," in err.value.problems[0].expected


def test_the_command_line_estimates_a_hugging_face_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257}))
    argv = ["--hf-config", str(config), "--gpus", "8", "--strategy", "fsdp2", "--micro-batch", "8"]
    assert memory.main([*argv, "--gpu-memory-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("123.7M params, 8 GPU(s), fsdp2, micro-batch 8 x 1024 tokens, bf16")
    assert out.rstrip().endswith("; fits")
    assert memory.main([*argv, "--tp", "3"]) == 2
    assert capsys.readouterr().err.strip() == "memory: --tp: got 3; a divisor of --gpus (8)"
    assert memory.main(["--hf-config", str(tmp_path / "missing.json")]) == 2
    assert "memory: --hf-config: " in capsys.readouterr().err
