"""A stack whose team guarantees its pools cannot honour is refused before any resource."""

from __future__ import annotations

import json

import pytest

from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations

NS = "uae-gpu-platform:"


def with_teams(stack: str, edit: dict[str, object], index: int = 0) -> dict[str, str]:
    config, _ = load_stack_file(stack)
    teams = json.loads(config[NS + "teams"])
    teams[index] |= edit
    config[NS + "teams"] = json.dumps(teams)
    return config


def test_a_gpu_quota_beyond_the_aws_pool_is_refused_with_a_named_key() -> None:
    with pytest.raises(PlanError) as caught:
        plan_registrations("uae-dev", with_teams("uae-dev", {"gpuQuota": 400}))
    message = str(caught.value)
    # g6.xlarge (moto's catalog: 1 L4, 4 vCPUs, 16 GiB), maxSize 4; the time-sliced pool
    # has 1 node of 4 slices.
    assert (
        f"{NS}teams[sandbox].gpuQuota: got 400; pool l4 can hold at most 4 GPUs "
        "(maxSize 4 x 1 GPUs, 3 vCPUs, 13 GiB per node after the platform's reserve of "
        "1 vCPUs and 3 GiB); lower the quota or raise the pool's maxSize"
    ) in message
    assert f"{NS}teams[sandbox].gpuQuota: got 400; pool l4-shared can hold at most 4 GPUs" in (
        message
    )
    assert "Traceback" not in message


def test_teams_that_together_overbook_a_pool_are_refused() -> None:
    # uae-prod: h200 is 4 x p5en.48xlarge = 32 GPUs; llm-research 16 + speech 24 + nlp 8
    # (the fleet's bursting team) = 48 > 32.
    with pytest.raises(PlanError) as caught:
        plan_registrations("uae-prod", with_teams("uae-prod", {"gpuQuota": 24}, index=1))
    assert (
        f"{NS}teams: got 48; the teams' guarantees on pool h200 add up to 48 GPUs "
        "(llm-research 16, speech 24, nlp 8); the pool can hold at most 32"
    ) in str(caught.value)


def test_onprem_quotas_are_checked_against_the_declared_nodes() -> None:
    # onprem-ib: h100-ib is 4 nodes x 8 H100 = 32 GPUs, already fully guaranteed.
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(with_teams("onprem-ib", {"gpuQuota": 17}))
    assert caught.value.problems == [
        f"{NS}teams: got 33; the teams' guarantees on pool h100-ib add up to 33 GPUs "
        "(nlp 17, vision 16); the pool can hold at most 32 (maxSize 4 x 8 GPUs, 212 vCPUs, "
        "1945 GiB per node after the platform's reserve of 12 vCPUs and 103 GiB); lower the "
        "quotas or raise the pool's maxSize"
    ]
