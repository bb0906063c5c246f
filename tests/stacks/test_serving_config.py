"""The serving and exampleService sections: typed, checked with the rest, each problem
named by the key a user writes."""

from __future__ import annotations

import json

import pytest

from stacks.config import parse_stack_config
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations
from tests.stacks.configs import NS, config_of, problems_of


def test_every_shipped_stack_enables_serving_with_a_held_example() -> None:
    for stack in ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib"):
        config = parse_stack_config(load_stack_file(stack)[0])
        assert config.serving is not None, stack
        assert config.example_service is not None and not config.example_service.released


def test_an_example_service_needs_serving_a_known_team_and_pool() -> None:
    service = json.loads(config_of("smb-cpu")[NS + "exampleService"])
    service |= {"team": "nobody", "pool": "gpu-nowhere"}
    problems = problems_of(config_of("smb-cpu", serving=None, exampleService=service))
    assert (
        f"{NS}serving: got None; an example service needs serving (KServe): add the serving section"
        in problems
    )
    assert any(p.startswith(f"{NS}exampleService.team: got 'nobody'") for p in problems)
    assert any(p.startswith(f"{NS}exampleService.pool: got 'gpu-nowhere'") for p in problems)


def test_the_registry_is_the_stacks_own_on_aws_and_required_on_premises() -> None:
    aws = problems_of(config_of("smb-cpu", serving={"registry": "docker.io/library"}))
    assert any(p.startswith(f"{NS}serving.registry: got 'docker.io/library'") for p in aws)
    onprem = problems_of(config_of("onprem-ib", serving={"predictorImageTag": "0.1.0"}))
    assert any(p.startswith(f"{NS}serving.registry: got None") for p in onprem)


def test_serving_values_are_checked_and_typos_named() -> None:
    problems = problems_of(
        config_of("smb-cpu", serving={"predictorImageTag": "latest", "driftMinuts": 30})
    )
    assert any(
        p.startswith(f"{NS}serving.driftMinuts: got 30; unknown key; did you mean driftMinutes?")
        for p in problems
    )
    assert any(p.startswith(f"{NS}serving.predictorImageTag: got 'latest'") for p in problems)


def test_canary_keys_go_together() -> None:
    service = json.loads(config_of("smb-cpu")[NS + "exampleService"])
    del service["canaryStoragePath"]
    problems = problems_of(config_of("smb-cpu", exampleService=service))
    assert problems == [
        f"{NS}exampleService.canaryStoragePath: got None; "
        "set canaryVersion and canaryStoragePath together (or neither)"
    ]


def test_a_model_outside_the_mlflow_artifacts_is_refused_before_deploying() -> None:
    service = json.loads(config_of("smb-cpu")[NS + "exampleService"])
    service |= {"storagePath": "../other-team/model", "canaryTrafficPercent": 10, "minReplicas": 2}
    with pytest.raises(PlanError) as caught:
        plan_registrations("smb-cpu", config_of("smb-cpu", exampleService=service))
    message = str(caught.value)
    assert f"{NS}exampleService.storagePath: got '../other-team/model'" in message
    assert f"{NS}exampleService.minReplicas: got 2; too few replicas" in message
    assert "Traceback" not in message


def test_the_tracking_images_registry_is_the_stacks_own_on_aws_and_required_on_premises() -> None:
    aws = problems_of(config_of("smb-cpu", tracking={"registry": "docker.io/library"}))
    assert any(p.startswith(f"{NS}tracking.registry: got 'docker.io/library'") for p in aws)
    tracking = json.loads(config_of("onprem-ib")[NS + "tracking"])
    del tracking["registry"]
    onprem = problems_of(config_of("onprem-ib", tracking=tracking))
    assert any(p.startswith(f"{NS}tracking.registry: got None") for p in onprem)
    # Without a tracking server no registry is asked for.
    config = parse_stack_config(config_of("onprem-ib", tracking={"enabled": False}, pipelines=None))
    assert config.tracking.registry is None


def test_the_llm_gateways_images_come_from_the_stacks_own_ecr_on_aws() -> None:
    gateway = json.loads(config_of("smb-cpu")[NS + "llmGateway"])
    gateway["registry"] = "docker.io/envoyproxy"
    problems = problems_of(config_of("smb-cpu", llmGateway=gateway))
    assert any(
        p.startswith(f"{NS}llmGateway.registry: got 'docker.io/envoyproxy'") for p in problems
    )
