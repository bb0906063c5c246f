"""A bad stack config fails before any resource exists, with every problem named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modules.aws.instance_types import InstanceTypeInfo
from stacks import offline_plan
from stacks.catalog import catalog_problems
from stacks.config import parse_stack_config
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations
from tests.stacks.configs import NS, config_of, problems_of


def prod_config(**changes: object) -> dict[str, str]:
    """The uae-prod config map with some keys replaced (objects given as Python values)."""
    return config_of("uae-prod", **changes)


def test_shipped_stack_parses() -> None:
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    assert config.region == "me-central-1"
    assert [p.name for p in config.node_pools] == ["system", "h200", "preprocess"]


def test_region_outside_the_allowlist_is_refused() -> None:
    problems = problems_of(prod_config(region="eu-west-1"))
    assert problems == [f"{NS}region: got 'eu-west-1'; must be one of allowedRegions: me-central-1"]


def test_allowlist_cannot_be_widened_beyond_the_uae() -> None:
    problems = problems_of(
        prod_config(region="eu-west-1", allowedRegions=["me-central-1", "eu-west-1"])
    )
    assert any(p.startswith(f"{NS}allowedRegions[1]: got 'eu-west-1'") for p in problems)


def test_typo_key_is_named_with_the_allowed_keys() -> None:
    pools = json.loads(prod_config()[NS + "nodePools"])
    pools[1]["minSzie"] = 1
    problems = problems_of(prod_config(nodePools=pools))
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{NS}nodePools[1].minSzie: got 1; unknown key; did you mean minSize? allowed keys:"
    )
    assert "minSize" in problems[0]


def test_unknown_top_level_key() -> None:
    config = prod_config()
    config[NS + "regoin"] = "me-central-1"
    assert problems_of(config)[0].startswith(f"{NS}regoin: got 'me-central-1'; unknown key")


def test_every_problem_is_reported_at_once() -> None:
    pools = json.loads(prod_config()[NS + "nodePools"])
    pools[1] |= {"minSize": 5, "maxSize": 2}
    pools[2]["diskSizeGib"] = "big"
    config = prod_config(
        nodePools=pools,
        network={"vpcCidr": "10.40.0.0/33"},
        kubernetesVersion="1.19",
        cluster={"publicAccessCidrs": ["0.0.0.0/0", "banana"]},
    )
    problems = problems_of(config)
    expected_keys = [
        f"{NS}kubernetesVersion",
        f"{NS}network.vpcCidr",
        f"{NS}cluster.publicAccessCidrs[0]",
        f"{NS}cluster.publicAccessCidrs[1]",
        f"{NS}nodePools[1].minSize",
        f"{NS}nodePools[2].diskSizeGib",
    ]
    for key in expected_keys:
        assert any(p.startswith(key + ":") for p in problems), (key, problems)


def test_wrong_types_name_the_expected_type() -> None:
    problems = problems_of(prod_config(network={"natGatewayPerZone": "yes", "zoneCount": 2.5}))
    assert f"{NS}network.natGatewayPerZone: got 'yes'; expected true or false" in problems
    assert f"{NS}network.zoneCount: got 2.5; expected an integer" in problems


def test_required_tags() -> None:
    problems = problems_of(prod_config(tags={"owner": "x"}))
    assert problems == [f"{NS}tags.data-classification: got None; this tag is required"]


def test_placement_group_with_a_capacity_reservation_is_refused() -> None:
    pools = json.loads(prod_config()[NS + "nodePools"])
    pools[1] |= {
        "placementGroup": True,
        "capacity": {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"},
    }
    problems = problems_of(prod_config(nodePools=pools))
    assert problems == [
        f"{NS}nodePools[1].placementGroup: got True; "
        "a placement group breaks capacity reservations and blocks; leave it off"
    ]


def test_catalog_refuses_a_type_not_offered_and_efa_on_a_type_without_it() -> None:
    pools = json.loads(prod_config()[NS + "nodePools"])
    pools[1]["instanceType"] = "p5.48xlarge"  # not offered in me-central-1 (moto's catalog)
    pools[2] |= {"instanceType": "c7i.4xlarge", "efa": True}
    with pytest.raises(PlanError) as caught:
        plan_registrations("uae-prod", prod_config(nodePools=pools))
    message = str(caught.value)
    assert (
        f"{NS}nodePools[1].instanceType: got 'p5.48xlarge'; me-central-1 does not offer" in message
    )
    assert f"{NS}nodePools[2].efa: got True; c7i.4xlarge does not support EFA" in message
    assert "Traceback" not in message


def test_cli_reports_a_bad_stack_file_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_file = tmp_path / "Pulumi.broken.yaml"
    stack_file.write_text(
        "config:\n"
        "  uae-gpu-platform:region: eu-west-1\n"
        "  uae-gpu-platform:tags: {owner: a, data-classification: b}\n"
        "  uae-gpu-platform:nodePools:\n"
        "    - {name: system, role: system, instanceType: m7i.xlarge, minSize: 1}\n"
    )
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    assert offline_plan.main(["--out", str(tmp_path / "out"), "broken"]) == 2
    err = capsys.readouterr().err
    assert "Stack 'broken' has 1 configuration problem:" in err
    assert "uae-gpu-platform:region: got 'eu-west-1'" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_reports_an_unknown_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert offline_plan.main(["no-such-stack"]) == 2
    err = capsys.readouterr().err
    assert "Unknown stack 'no-such-stack'" in err and "uae-prod" in err


def test_cli_reports_malformed_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text("config: [unclosed\n")
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    assert offline_plan.main(["bad"]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


def test_a_misspelt_instance_type_is_a_config_problem_not_a_crash() -> None:
    pools = json.loads(prod_config()[NS + "nodePools"])
    pools[1]["instanceType"] = "p5en.48xlargee"
    with pytest.raises(PlanError) as caught:
        plan_registrations("uae-prod", prod_config(nodePools=pools))
    assert (
        f"{NS}nodePools[1].instanceType: got 'p5en.48xlargee'; "
        "me-central-1 does not offer this instance type (check the spelling)"
    ) in str(caught.value)


def test_values_that_are_not_json_are_named() -> None:
    config = prod_config()
    config[NS + "network"] = "{vpcCidr: 10.0.0.0/16"
    config[NS + "region"] = ""
    problems = problems_of(config)
    assert any(
        p.startswith(f"{NS}network: got '{{vpcCidr: 10.0.0.0/16'; not valid JSON") for p in problems
    )
    assert f"{NS}region: got ''; must be one of allowedRegions: me-central-1" in problems


def test_a_null_example_job_means_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (offline_plan.STACKS_DIR / "Pulumi.smb-cpu.yaml").read_text()
    (tmp_path / "Pulumi.nojob.yaml").write_text(text + "  uae-gpu-platform:exampleJob: null\n")
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    config = parse_stack_config(load_stack_file("nojob")[0])
    assert config.example_job is None


def test_empty_node_pools_are_reported_once() -> None:
    problems = problems_of(prod_config(nodePools=[]))
    assert [p for p in problems if p.startswith(f"{NS}nodePools:")] == [
        f"{NS}nodePools: got []; declare the node pools (one system pool)"
    ]


def test_example_job_preset_is_checked_with_the_config() -> None:
    problems = problems_of(
        prod_config(exampleJob={"team": "llm-research", "pool": "h200", "preset": "huge"})
    )
    assert len(problems) == 1 and problems[0].startswith(
        f"{NS}exampleJob.preset: got 'huge'; one of "
    )


def test_cli_reports_an_unwritable_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert offline_plan.main(["--out", str(blocker), "smb-cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write the plan to") and "Traceback" not in err


def test_a_type_offered_only_outside_the_vpc_zones_is_refused() -> None:
    config = parse_stack_config(prod_config())
    p5en = InstanceTypeInfo(
        name="p5en.48xlarge", vcpus=192, memory_mib=2097152, gpu_count=8, gpu_name="H200",
        gpu_memory_mib=144384, efa_supported=True, efa_max_interfaces=16, network_cards=16,
        architectures=("x86_64",), offered_zones=("me-central-1c",),
    )  # fmt: skip
    plain = InstanceTypeInfo(
        name="x", vcpus=8, memory_mib=32768, gpu_count=0, gpu_name=None, gpu_memory_mib=0,
        efa_supported=False, efa_max_interfaces=0, network_cards=1, architectures=("x86_64",),
        offered_zones=("me-central-1a", "me-central-1b"),
    )  # fmt: skip
    catalog = {"p5en.48xlarge": p5en, "m7i.2xlarge": plain, "c7i.8xlarge": plain}
    problems = catalog_problems(config, ("me-central-1a", "me-central-1b"), catalog)
    assert problems == [
        f"{NS}nodePools[1].instanceType: got 'p5en.48xlarge'; not offered in the VPC's zones "
        "(me-central-1a, me-central-1b); zones offering it: me-central-1c"
    ]
