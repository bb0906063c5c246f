"""Config messages name what the user wrote, and a failed plan leaves no stale output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks import offline_plan
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError, stack_key
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations

NS = "uae-gpu-platform:"


def stack_config(stack: str, **changes: object) -> dict[str, str]:
    config, _ = load_stack_file(stack)
    for key, value in changes.items():
        config[NS + key] = json.dumps(value)
    return config


def test_python_field_paths_become_stack_file_keys() -> None:
    assert stack_key("teams[sandbox].pod_security") == "teams[sandbox].podSecurity"
    assert stack_key("node_pools[2].capacity.reservation_id") == (
        "nodePools[2].capacity.reservationId"
    )
    assert stack_key("tags.data-classification") == "tags.data-classification"


def test_layer_problems_name_the_camel_case_key() -> None:
    teams = json.loads(load_stack_file("uae-dev")[0][NS + "teams"])
    teams[0]["podSecurity"] = "baseline"  # only allowed on fabric stacks; uae-dev has none
    with pytest.raises(PlanError) as caught:
        plan_registrations("uae-dev", stack_config("uae-dev", teams=teams))
    message = str(caught.value)
    assert f"{NS}teams[sandbox].podSecurity: got 'baseline'; baseline is only for" in message
    assert "pod_security" not in message


def test_a_duplicate_team_names_both_entries() -> None:
    teams = json.loads(load_stack_file("uae-prod")[0][NS + "teams"])
    teams.append(dict(teams[0]))
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(stack_config("uae-prod", teams=teams))
    duplicate = len(teams) - 1
    assert caught.value.problems == [
        f"{NS}teams[{duplicate}].name: got 'llm-research'; teams[0] already uses this name; "
        "names must be unique"
    ]


def test_a_duplicate_pool_names_every_entry() -> None:
    pools = json.loads(load_stack_file("uae-prod")[0][NS + "nodePools"])
    pools += [dict(pools[2]), dict(pools[2])]
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(stack_config("uae-prod", nodePools=pools))
    assert (
        f"{NS}nodePools[4].name: got 'preprocess'; nodePools[2] and nodePools[3] already use "
        "this name; names must be unique"
    ) in caught.value.problems


def test_an_unquoted_version_gets_a_hint_to_quote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (offline_plan.STACKS_DIR / "Pulumi.smb-cpu.yaml").read_text()
    lines = [
        "  uae-gpu-platform:kubernetesVersion: 1.30" if "kubernetesVersion" in line else line
        for line in text.splitlines()
    ]
    assert any(line.endswith(": 1.30") for line in lines)
    (tmp_path / "Pulumi.mine.yaml").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(load_stack_file("mine")[0])
    (problem,) = caught.value.problems
    assert problem.startswith(f"{NS}kubernetesVersion: got '1.3'; supported versions: ")
    assert 'read by YAML as the number 1.3: quote it, kubernetesVersion: "1.30"' in problem


def test_unknown_stack_lists_shipped_stacks_apart_from_the_users_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("uae-prod", "team-a"):
        (tmp_path / f"Pulumi.{name}.yaml").write_text("config: {}\n")
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    assert offline_plan.main(["uae-prd"]) == 2
    err = capsys.readouterr().err
    assert "Unknown stack 'uae-prd'" in err
    assert "Shipped stacks: onprem-ib, smb-cpu, uae-dev, uae-prod.\n" in err
    assert "Your stacks: team-a (" in err


def test_the_shipped_stack_list_matches_the_stack_files() -> None:
    assert offline_plan.available_stacks() == list(offline_plan.SHIPPED_STACKS)


def test_a_failed_plan_removes_the_previous_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (offline_plan.STACKS_DIR / "Pulumi.smb-cpu.yaml").read_text()
    stack_file = tmp_path / "Pulumi.mine.yaml"
    stack_file.write_text(text)
    monkeypatch.setattr(offline_plan, "STACKS_DIR", tmp_path)
    out = tmp_path / "plan"
    assert offline_plan.main(["--quiet", "--out", str(out), "mine"]) == 0
    plan = out / "mine.json"
    assert json.loads(plan.read_text())["steps"]
    assert sorted(p.name for p in out.iterdir()) == ["mine.json"]  # no temporary file left

    stack_file.write_text(text.replace("region: me-central-1", "region: eu-west-1"))
    assert offline_plan.main(["--quiet", "--out", str(out), "mine"]) == 2
    err = capsys.readouterr().err
    assert "region: got 'eu-west-1'" in err
    assert f"removed the previous {plan}" in err
    assert list(out.iterdir()) == []


def test_several_stacks_are_planned_in_turn_and_the_first_failure_stops_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make plan-all` plans every stack in one process: an unknown stack ends the run
    with its one line and exit 2 before the next stack is planned."""
    out = tmp_path / "plan"
    assert offline_plan.main(["--quiet", "--out", str(out), "uae-prd", "smb-cpu"]) == 2
    assert "uae-prd" in capsys.readouterr().err
    assert not (out / "smb-cpu.json").exists()


def test_a_failed_write_removes_the_previous_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    (out / "smb-cpu.json").write_text('{"steps": []}\n')  # a previous run's plan

    def disk_full(src: str, dst: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(offline_plan.os, "replace", disk_full)
    assert offline_plan.main(["--quiet", "--out", str(out), "smb-cpu"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the plan" in err and "No space left on device" in err
    assert list(out.iterdir()) == []  # neither the old plan nor the temporary file


def test_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "x.json"
    offline_plan.write_atomically(target, "old\n")
    offline_plan.write_atomically(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
