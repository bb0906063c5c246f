"""`python -m policies.review`: reports, SARIF validity, exit codes, config, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from policies.review.__main__ import main
from policies.review.evaluate import policy_config_problems
from policies.rules import ALL_RULES
from tests.policies.builder import compliant_plan, find_step

HERE = Path(__file__).parent
REAL_PREVIEW = HERE / "fixtures" / "real-preview.json"
SARIF_SCHEMA = json.loads((HERE / "schemas" / "sarif-schema-2.1.0.json").read_text())


def sarif_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft4Validator(SARIF_SCHEMA)
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(document)]


def write(tmp_path: Path, name: str, document: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def broken_plan() -> dict[str, Any]:
    plan = compliant_plan()
    find_step(plan, "aws:ebs/volume:Volume", "scratch")["inputs"]["encrypted"] = False
    find_step(plan, "aws:kms/key:Key", "storage-key")["inputs"]["multiRegion"] = True
    return plan


def review_command(plan: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m policies.review --plan <plan> --out <out>``, as a user runs it."""
    command = [sys.executable, "-m", "policies.review", "--plan", str(plan), "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_a_real_preview_with_unknowns_and_secrets_passes_with_advisories(tmp_path: Path) -> None:
    result = review_command(REAL_PREVIEW, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    unknown = [f for f in report["findings"] if f["kind"] == "cannot-check"]
    assert [f["ruleId"] for f in unknown] == ["aws-s3-bucket-tls-only"]
    assert "can't be known during preview" in unknown[0]["message"]
    # Keys given as unknown values are traced to the stack's key through property dependencies.
    keys = {
        row["name"]: row["key"]
        for row in report["residencyEvidence"]
        if row["type"] == "aws:ebs/volume:Volume"
    }
    assert keys == {"scratch": "storage"}
    assert sarif_errors(json.loads((tmp_path / "report.sarif").read_text())) == []


def test_a_broken_plan_fails_naming_the_rules(tmp_path: Path) -> None:
    plan = write(tmp_path, "broken.json", broken_plan())
    result = review_command(plan, tmp_path / "out")
    assert result.returncode == 1
    assert "FAIL" in result.stdout
    assert "    aws-encryption-customer-managed-key: 1\n      scratch: " in result.stdout
    assert "    uae-kms-no-multi-region: 1\n      storage-key: " in result.stdout
    sarif = json.loads((tmp_path / "out" / "report.sarif").read_text())
    assert sarif_errors(sarif) == []
    errors = {(r["ruleId"], r["level"]) for r in sarif["runs"][0]["results"]}
    assert ("uae-kms-no-multi-region", "error") in errors
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "**Verdict: FAIL**" in markdown
    assert "UAE PDPL Art. 22" in markdown  # mapped controls are shown with each violation
    assert "Remediation: Set `multiRegion: false`" in markdown


def test_reports_go_to_build_review_plan_stem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = write(tmp_path, "my-stack.json", compliant_plan())
    assert main(["--plan", str(plan)]) == 0
    out = tmp_path / "build" / "review" / "my-stack"
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "report.sarif"]
    report = json.loads((out / "report.json").read_text())
    # No mandatory rule fails, but the plan's Helm release was not rendered.
    assert report["verdict"] == "incomplete"
    rules = {r["id"]: r for r in report["rules"]}
    assert rules["k8s-no-privileged"]["evaluated"] == 2
    assert rules["k8s-no-privileged"]["passed"] == 2
    assert (rules["k8s-no-host-path"]["passed"], rules["k8s-no-host-path"]["exempted"]) == (1, 1)
    # The device plugin's hostPath exception is listed with its reason.
    assert [(e["ruleId"], e["source"]) for e in report["exemptions"]] == [
        ("k8s-no-host-path", "annotation")
    ]
    assert "device plugins register through the kubelet socket" in (out / "report.md").read_text()
    assert sarif_errors(json.loads((out / "report.sarif").read_text())) == []


def _plan_with(step: dict[str, Any] | None = None, state: dict[str, Any] | None = None) -> str:
    """A one-step plan document with ``step`` / ``state`` keys overridden."""
    urn = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::data"
    new_state = {"urn": urn, "type": "aws:s3/bucket:Bucket", "inputs": {}, **(state or {})}
    return json.dumps(
        {"steps": [{"op": "create", "urn": urn, "newState": new_state, **(step or {})}]}
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an object"),
        ('{"steps": {}}', "no `steps` list"),
        ('{"steps": [{"op": "create"}]}', "has no `newState`"),
        ('{"steps": [{"op": "create", "newState": {"urn": "x", "type": "t"}}]}', "not a URN"),
        ('{"steps": []}', "the plan has no resources: is this the output of pulumi preview"),
        ("{}", "no `steps` list"),
        (_plan_with(step={"provider": 5}), "steps[0].provider is a number, not a string"),
        (_plan_with(state={"provider": ["x"]}), "steps[0].newState.provider is an array"),
        (_plan_with(state={"urn": 7}), "steps[0].newState.urn is a number, not a string"),
        (_plan_with(step={"urn": 7}), "steps[0].urn is a number, not a string"),
        (_plan_with(state={"type": {"a": 1}}), "steps[0].newState.type is an object"),
        (_plan_with(state={"parent": 3}), "steps[0].newState.parent is a number"),
    ],
)
def test_a_malformed_plan_gets_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    assert main(["--plan", str(write(tmp_path, "bad.json", content))]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_directory_is_not_a_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plan", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: is a directory, not a plan file" in err
    assert "no such file" not in err


@pytest.mark.parametrize("below", ["", "below"], ids=["existing-file", "below-a-file"])
def test_an_unwritable_report_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], below: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / below if below else blocker
    plan = write(tmp_path, "plan.json", compliant_plan())
    assert main(["--plan", str(plan), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write reports to {out}: ")
    assert len(err.strip().splitlines()) == 1


def test_a_missing_plan_says_how_to_make_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--plan", str(tmp_path / "nope.json")]) == 2
    assert "make plan" in capsys.readouterr().err


def run_with_config(tmp_path: Path, plan: Any, config: Any) -> tuple[int, dict[str, Any]]:
    plan_path = write(tmp_path, "plan.json", plan)
    config_path = write(tmp_path, "config.json", config)
    code = main(
        [
            "--plan",
            str(plan_path),
            "--policy-config",
            str(config_path),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    report = json.loads((tmp_path / "out" / "report.json").read_text()) if code != 2 else {}
    return code, report


def refused_config(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Any) -> str:
    """What the review says on stderr when it refuses ``config`` (exit 2, no traceback)."""
    code, _ = run_with_config(tmp_path, compliant_plan(), config)
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_an_active_exemption_sets_a_violation_aside_and_is_listed(tmp_path: Path) -> None:
    plan = compliant_plan()
    find_step(plan, "aws:ebs/volume:Volume", "scratch")["inputs"]["encrypted"] = False
    find_step(plan, "aws:kms/key:Key", "storage-key")["inputs"]["enableKeyRotation"] = False
    config = {
        "aws-encryption-customer-managed-key": {
            "exemptions": [
                {
                    "resource": "scratch",
                    "reason": "vendor disk image, ticket SEC-12",
                    "expires": "2999-12-31",
                }
            ]
        },
        "aws-kms-key-rotation": "advisory",
    }
    code, report = run_with_config(tmp_path, plan, config)
    assert code == 0
    assert [f["ruleId"] for f in report["findings"] if f["enforcement"] == "mandatory"] == []
    assert [f["ruleId"] for f in report["findings"]] == ["aws-kms-key-rotation"]
    exemption = next(e for e in report["exemptions"] if e["source"] == "pack config")
    assert exemption == {
        "ruleId": "aws-encryption-customer-managed-key",
        "urn": exemption["urn"],
        "violation": "`encrypted` is not true",
        "reason": "vendor disk image, ticket SEC-12",
        "source": "pack config",
        "expires": "2999-12-31",
    }


def test_an_expired_exemption_no_longer_applies(tmp_path: Path) -> None:
    config = {
        "aws-encryption-customer-managed-key": {
            "exemptions": [{"resource": "*scratch", "reason": "old", "expires": "2020-01-01"}]
        }
    }
    code, report = run_with_config(tmp_path, broken_plan(), config)
    assert code == 1
    messages = [
        f["message"]
        for f in report["findings"]
        if f["ruleId"] == "aws-encryption-customer-managed-key"
    ]
    assert messages == ["`encrypted` is not true (exemption expired on 2020-01-01)"]


def test_config_cannot_configure_residency_away(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = compliant_plan()
    find_step(plan, "aws:ec2/securityGroup:SecurityGroup", "nodes")["inputs"]["region"] = (
        "me-south-1"
    )
    code, _ = run_with_config(tmp_path, plan, {})
    assert code == 1
    code, _ = run_with_config(
        tmp_path,
        plan,
        {"uae-aws-region-allowlist": {"allowedRegions": ["me-central-1", "me-south-1"]}},
    )
    assert code == 2
    code, _ = run_with_config(
        tmp_path, plan, {"uae-aws-region-allowlist": {"allowedRegions": ["me-central-1"]}}
    )
    assert code == 1
    code, _ = run_with_config(tmp_path, plan, {"all": "disabled"})
    assert code == 2
    err = capsys.readouterr().err
    assert "uae-aws-region-allowlist" in err and "residency" in err
    # "all" still applies to every other rule when each residency rule keeps its level.
    residency = {r.id: r.enforcement.value for r in ALL_RULES if r.id.startswith("uae-")}
    code, report = run_with_config(tmp_path, plan, {"all": "disabled", **residency})
    assert code == 1
    assert {r["id"] for r in report["rules"]} == set(residency)
    disabled = {r["ruleId"] for r in report["disabledOrDowngraded"]}
    assert disabled == {r.id for r in ALL_RULES} - set(residency)
    assert report["summary"]["rulesDisabledByConfig"] == len(disabled)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"uae-aws-region-allowlist": {"allowedRegions": ["eu-west-1"]}}, "allowedRegions"),
        (
            {"aws-encryption-customer-managed-key": {"allowedRegions": ["me-south-1"]}},
            "allowedRegions",
        ),
        ({"uae-aws-region-allowlist": {"allowedRegions": []}}, "allowedRegions"),
        ({"uae-k8s-site-declaration": {"allowedCountries": ["AE", "BH"]}}, "allowedCountries"),
        ({"uae-aws-region-allowlist": "disabled"}, "uae-aws-region-allowlist"),
        ({"uae-kms-no-multi-region": "advisory"}, "uae-kms-no-multi-region"),
        (
            {"uae-no-cross-region-copies": {"enforcementLevel": "advisory"}},
            "uae-no-cross-region-copies",
        ),
        ({"uae-helm-chart-images": "disabled"}, "uae-helm-chart-images"),
        ({"all": "advisory"}, "uae-k8s-site-declaration"),
    ],
)
def test_residency_can_only_be_narrowed_or_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Any, expected: str
) -> None:
    err = refused_config(tmp_path, capsys, config)
    assert expected in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "config",
    [
        {"uae-aws-region-allowlist": {"allowedRegions": ["me-central-1"]}},
        {"uae-k8s-site-declaration": {"allowedCountries": ["AE"]}},
        {"uae-helm-chart-images": "advisory"},  # its own default level
        {"uae-helm-chart-images": "mandatory"},
        {"uae-aws-region-allowlist": "remediate"},
    ],
)
def test_residency_settings_that_keep_or_tighten_are_accepted(tmp_path: Path, config: Any) -> None:
    code, report = run_with_config(tmp_path, compliant_plan(), config)
    assert code == 0
    assert report["disabledOrDowngraded"] == []


def test_the_report_lists_rules_the_config_disabled_or_downgraded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "k8s-no-privileged": "disabled",
        "aws-kms-key-rotation": {"enforcementLevel": "advisory"},
        "k8s-read-only-root-filesystem": "mandatory",  # tightened: not listed
    }
    code, report = run_with_config(tmp_path, compliant_plan(), config)
    assert code == 0
    assert report["disabledOrDowngraded"] == [
        {
            "ruleId": "aws-kms-key-rotation",
            "severity": "medium",
            "default": "mandatory",
            "configured": "advisory",
            "setBy": "aws-kms-key-rotation",
        },
        {
            "ruleId": "k8s-no-privileged",
            "severity": "critical",
            "default": "mandatory",
            "configured": "disabled",
            "setBy": "k8s-no-privileged",
        },
    ]
    assert report["summary"]["rulesDisabledByConfig"] == 1
    assert report["summary"]["rulesDowngradedByConfig"] == 1
    out = capsys.readouterr().out
    assert "disabled by the pack config: k8s-no-privileged" in out
    assert "downgraded to advisory by the pack config: aws-kms-key-rotation" in out
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Rules disabled or downgraded by the pack config" in markdown
    assert "| `k8s-no-privileged` | critical | mandatory | disabled |" in markdown
    assert "- Rules disabled by the pack config: 1" in markdown
    sarif = json.loads((tmp_path / "out" / "report.sarif").read_text())
    assert sarif_errors(sarif) == []
    run = sarif["runs"][0]
    overrides = {
        o["descriptor"]["id"]: o["configuration"]
        for o in run["invocations"][0]["ruleConfigurationOverrides"]
    }
    assert overrides == {
        "k8s-no-privileged": {"enabled": False},
        "aws-kms-key-rotation": {"level": "warning"},
    }
    assert run["properties"]["disabledRules"] == ["k8s-no-privileged"]
    assert run["properties"]["downgradedRules"] == ["aws-kms-key-rotation"]


def test_a_review_without_config_lists_nothing_disabled(tmp_path: Path) -> None:
    code, report = run_with_config(tmp_path, compliant_plan(), {})
    assert code == 0
    assert report["disabledOrDowngraded"] == []
    assert report["summary"]["rulesDisabledByConfig"] == 0


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"no-such-rule": "mandatory"}, "unknown rule 'no-such-rule'"),
        ({"uae-aws-region-allowlist": "sometimes"}, "enforcement level 'sometimes'"),
        ({"uae-aws-region-allowlist": {"allowedRegions": "me-central-1"}}, "allowedRegions"),
        ({"uae-aws-region-allowlist": {"requiredTags": ["a"]}}, "does not read requiredTags"),
        (
            {
                "aws-required-tags": {
                    "exemptions": [{"resource": "x", "reason": "", "expires": "soon"}]
                }
            },
            "exemptions[0].reason",
        ),
    ],
)
def test_bad_pack_config_is_reported_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Any, expected: str
) -> None:
    assert expected in refused_config(tmp_path, capsys, config)


def test_the_compliance_page_example_config_is_accepted() -> None:
    page = (HERE.parents[1] / "docs" / "compliance.md").read_text()
    blocks = [b.split("```", 1)[0] for b in page.split("```json\n")[1:]]
    assert blocks
    for block in blocks:
        assert policy_config_problems(json.loads(block)) == []
