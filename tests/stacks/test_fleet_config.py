"""The fleet and cost sections' problems: each named with its key, all at once, before
any resource exists."""

from __future__ import annotations

import json

import pytest

from stacks.config import StackConfig, parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.cost import price_problems
from stacks.fleet import fleet_problems
from stacks.offline_plan import PlanError, plan_registrations
from stacks.pricing import load_snapshot
from tests.stacks.configs import NS, config_of


def parsed(stack: str, **changes: object) -> StackConfig:
    return parse_stack_config(config_of(stack, **changes))


def problems_for(stack: str, configs: dict[str, StackConfig]) -> list[str]:
    return fleet_problems(stack, configs[stack], configs.get, lambda: sorted(configs))


def shipped() -> dict[str, StackConfig]:
    return {"onprem-ib": parsed("onprem-ib"), "uae-prod": parsed("uae-prod")}


def test_the_shipped_fleet_has_no_problem() -> None:
    configs = shipped()
    assert problems_for("onprem-ib", configs) == []
    assert problems_for("uae-prod", configs) == []


def test_a_worker_claimed_by_two_managers_is_named_on_both_sides() -> None:
    configs = shipped()
    configs["site-b"] = parsed(
        "onprem-ib", site={"name": "ae-dubai-dc2", "kind": "on-premises", "country": "AE"}
    )
    problems = problems_for("onprem-ib", configs)
    assert any("stack site-b lists it as its worker too" in p for p in problems), problems
    problems = problems_for("site-b", configs)
    assert any(
        "names 'onprem-ib' as its manager: a worker has exactly one manager" in p for p in problems
    )


def test_a_worker_that_is_its_own_manager() -> None:
    configs = shipped()
    configs["onprem-ib"] = parsed(
        "onprem-ib",
        fleet={"workers": [{"stack": "onprem-ib"}, {"stack": "uae-prod"}], "burstTeams": ["nlp"]},
    )
    problems = problems_for("onprem-ib", configs)
    assert problems == [
        f"{NS}fleet.workers[0].stack: got 'onprem-ib'; a worker cannot be its own manager "
        "(Kueue does not run the manager as one of its workers)"
    ]
    configs["uae-prod"] = parsed("uae-prod", fleetWorker={"manager": "uae-prod"})
    assert (
        f"{NS}fleetWorker.manager: got 'uae-prod'; a worker cannot be its own manager"
        in problems_for("uae-prod", configs)
    )


def test_a_cycle_is_named() -> None:
    configs = shipped()
    configs["uae-prod"] = parsed(
        "uae-prod",
        fleetWorker=None,
        siteLink=None,  # a site link belongs to a worker
        fleet={"workers": [{"stack": "onprem-ib"}]},
    )
    problems = problems_for("onprem-ib", configs)
    assert any("cycle: onprem-ib -> uae-prod -> onprem-ib" in p for p in problems), problems


def test_an_unknown_stack_reference() -> None:
    configs = shipped()
    configs["onprem-ib"] = parsed(
        "onprem-ib", fleet={"workers": [{"stack": "uae-prd"}], "burstTeams": ["nlp"]}
    )
    (problem,) = problems_for("onprem-ib", configs)
    assert problem.startswith(
        f"{NS}fleet.workers[0].stack: got 'uae-prd'; unknown stack: no stacks/Pulumi.uae-prd.yaml"
    )
    assert "uae-prod" in problem


def test_a_worker_outside_the_uae() -> None:
    configs = shipped()
    configs["abroad"] = parsed(
        "onprem-ib",
        site={"name": "de-frankfurt-dc1", "kind": "on-premises", "country": "DE"},
        fleet=None,
        fleetWorker={"manager": "onprem-ib"},
    )
    configs["onprem-ib"] = parsed(
        "onprem-ib",
        fleet={"workers": [{"stack": "uae-prod"}, {"stack": "abroad"}], "burstTeams": ["nlp"]},
    )
    problems = problems_for("onprem-ib", configs)
    assert problems == [
        f"{NS}fleet.workers[1].stack: got 'abroad'; a worker must be a UAE cluster: "
        "site de-frankfurt-dc1 is in country DE, not AE"
    ]
    assert any("this worker is not a UAE cluster" in p for p in problems_for("abroad", configs))


def test_a_bursting_team_missing_on_the_worker() -> None:
    configs = shipped()
    configs["onprem-ib"] = parsed(
        "onprem-ib", fleet={"workers": [{"stack": "uae-prod"}], "burstTeams": ["vision"]}
    )
    (problem,) = problems_for("onprem-ib", configs)
    assert "bursting team 'vision' is not a team of uae-prod" in problem


def test_own_section_problems_come_together() -> None:
    with pytest.raises(ConfigError) as caught:
        parsed(
            "onprem-ib",
            fleet={"workers": [], "burstTeams": ["nobody"]},
            fleetWorker={"manager": "uae-prod"},
            budgets=[{"team": "nlp", "monthlyUsd": -5}, {"team": "vision", "monthlyUsd": "lots"}],
            onpremPricing={"gpuHourUsd": -1, "cpuHourUsd": 0.01, "memoryGibHourUsd": 0.001},
        )
    problems = caught.value.problems
    expected = [
        f"{NS}fleet.workers: got []; list at least one worker stack",
        f"{NS}budgets[0].monthlyUsd: got -5.0; a positive number of USD per month",
        f"{NS}budgets[1].monthlyUsd: got 'lots'; expected a number",
        f"{NS}onpremPricing.gpuHourUsd: got -1.0; a price of 0 or more (USD)",
    ]
    for line in expected:
        assert line in problems, problems


def test_a_manager_and_worker_at_once_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parsed("onprem-ib", fleetWorker={"manager": "uae-prod"})
    assert any(
        p.startswith(f"{NS}fleetWorker: got 'uae-prod'; a stack is a fleet manager or a worker")
        for p in caught.value.problems
    )


def test_a_price_missing_for_a_pools_instance_type() -> None:
    pools = json.loads(config_of("uae-prod")[NS + "nodePools"])
    pools[2]["instanceType"] = "c7i.16xlarge"
    config = parsed("uae-prod", nodePools=pools)
    (problem,) = price_problems(config, load_snapshot())
    assert problem.startswith(
        f"{NS}nodePools[2].instanceType: got 'c7i.16xlarge'; no price in the me-central-1 snapshot"
    )
    assert price_problems(parsed("onprem-ib", onpremPricing=None), load_snapshot()) == [
        f"{NS}onpremPricing: missing; an onprem stack states its prices (gpuHourUsd, cpuHourUsd, "
        "memoryGibHourUsd) so OpenCost and `make cost` can price it"
    ]


def test_the_program_reports_fleet_and_price_problems_together_before_any_resource() -> None:
    config = config_of(
        "onprem-ib",
        fleet={"workers": [{"stack": "onprem-ib"}, {"stack": "nowhere"}]},
        onpremPricing=None,
    )
    with pytest.raises(PlanError) as caught:
        plan_registrations("onprem-ib", config)
    message = str(caught.value)
    assert "has 3 configuration problems" in message
    assert "fleet.workers[0].stack: got 'onprem-ib'" in message
    assert "fleet.workers[1].stack: got 'nowhere'; unknown stack" in message
    assert "onpremPricing: missing" in message
    assert "Traceback" not in message


def test_an_offered_type_without_a_price_stops_the_aws_program_before_any_resource() -> None:
    """The AWS pools' prices are checked with the instance catalog (one ~40 s plan)."""
    pools = json.loads(config_of("uae-prod")[NS + "nodePools"])
    pools[2]["instanceType"] = "m7i.4xlarge"  # offered in me-central-1, not in the snapshot
    with pytest.raises(PlanError) as caught:
        # Without the Spark job sized for the pool's c7i.8xlarge (its own sizing problem).
        plan_registrations("uae-prod", config_of("uae-prod", nodePools=pools, spark=None))
    message = str(caught.value)
    assert "has 1 configuration problem" in message
    assert f"{NS}nodePools[2].instanceType: got 'm7i.4xlarge'; no price" in message
