"""What the review cannot see (Helm releases, operator resources) is reported, never passed;
rendered manifests (`--rendered`) are judged by the same rules; `helm_inputs` writes
what `helm template` needs in the layout the review reads."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from policies.review.__main__ import main
from policies.review.evaluate import judges_kubernetes_objects
from policies.review.helm_inputs import main as helm_inputs_main
from policies.rules import RULES_BY_ID
from tests.policies.builder import compliant_plan, find_step

HERE = Path(__file__).parent
RENDERED = HERE / "fixtures" / "rendered"
SARIF_SCHEMA = json.loads((HERE / "schemas" / "sarif-schema-2.1.0.json").read_text())
RELEASE = "kubernetes:helm.sh/v3:Release"
# The fsx CSI driver release exactly as the program writes it (stacks uae-prod, uae-dev).
FSX_INPUTS = {
    "atomic": True,
    "chart": "aws-fsx-csi-driver",
    "cleanupOnFail": True,
    "createNamespace": False,
    "name": "aws-fsx-csi-driver",
    "namespace": "kube-system",
    "repositoryOpts": {"repo": "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"},
    "timeout": 900,
    "version": "1.17.0",
    "values": {
        "controller": {"nodeSelector": {"gpuplatform.ae/role": "system"}},
        "node": {
            "tolerations": [
                {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
                {"effect": "NoSchedule", "key": "gpuplatform.ae/fabric", "operator": "Exists"},
            ]
        },
    },
}
NODE_PLUGIN = "helm-aws-fsx-csi-driver:kube-system/fsx-csi-node"


def fsx_plan() -> dict[str, Any]:
    """The compliant plan with its one Helm release replaced by the fsx CSI driver's."""
    plan = compliant_plan()
    release = find_step(plan, RELEASE, "kube-prometheus-stack")
    release["urn"] = release["urn"].replace("::kube-prometheus-stack", "::helm-aws-fsx-csi-driver")
    release["inputs"] = copy.deepcopy(FSX_INPUTS)
    return plan


def review_files(
    tmp_path: Path, plan: dict[str, Any], *extra: str, config: Any = None
) -> tuple[int, dict[str, Any], str, str]:
    """Run the review; (exit status, report.json, report.md, stdout)."""
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    args = ["--plan", str(plan_path), "--out", str(tmp_path / "out"), *extra]
    if config is not None:
        config_path = tmp_path / "config.json"
        config_path.write_text(json.dumps(config))
        args += ["--policy-config", str(config_path)]
    result = subprocess.run(
        [sys.executable, "-m", "policies.review", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    report_path = tmp_path / "out" / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    markdown_path = tmp_path / "out" / "report.md"
    markdown = markdown_path.read_text() if markdown_path.is_file() else ""
    return result.returncode, report, markdown, result.stdout + result.stderr


def test_the_workload_rules_are_the_ones_whose_scope_includes_rendered_objects() -> None:
    scoped = {rule_id for rule_id, rule in RULES_BY_ID.items() if judges_kubernetes_objects(rule)}
    assert {
        "k8s-no-privileged",
        "k8s-no-host-path",
        "k8s-no-host-namespaces",
        "k8s-run-as-non-root",
        "uae-container-image-registry",
        "k8s-monitoring-not-public",
    } <= scoped
    # Rules about AWS resources or the release itself are not.
    assert not scoped & {"uae-aws-region-allowlist", "uae-helm-chart-images", "aws-required-tags"}


def test_an_unrendered_helm_release_is_reported_as_not_seen_not_passed(tmp_path: Path) -> None:
    code, report, markdown, stdout = review_files(tmp_path, compliant_plan())
    assert code == 0  # nothing failed: unseen is not a violation
    assert report["verdict"] == "incomplete"
    assert "INCOMPLETE" in stdout and "not seen by" in stdout
    release = find_step(compliant_plan(), RELEASE, "kube-prometheus-stack")["urn"]
    rules = {r["id"]: r for r in report["rules"]}
    assert rules["k8s-no-privileged"]["notEvaluated"] == [release]
    assert rules["k8s-no-privileged"]["passed"] == 2  # what it did see
    assert rules["aws-kms-key-rotation"]["notEvaluated"] == []
    [unseen] = report["notEvaluated"]
    assert unseen["urn"] == release
    assert "monitoring/kube-prometheus-stack" in unseen["what"]
    assert "k8s-no-privileged" in unseen["rules"]
    assert report["summary"]["notEvaluated"] == 1
    assert "**Verdict: INCOMPLETE**" in markdown
    assert "| Helm release monitoring/kube-prometheus-stack (kube-prometheus-stack 75.6.0) |" in (
        markdown
    )
    assert "| `k8s-no-privileged` | critical | mandatory | 2 | 2 of 2 objects; 1 not seen |" in (
        markdown
    )
    sarif = json.loads((tmp_path / "out" / "report.sarif").read_text())
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    run = sarif["runs"][0]
    assert run["properties"]["verdict"] == "incomplete"
    [notice] = run["invocations"][0]["toolExecutionNotifications"]
    assert notice["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == release


def test_an_operator_resource_is_listed_as_workloads_nobody_evaluated(tmp_path: Path) -> None:
    plan = compliant_plan()
    k8s = find_step(plan, "kubernetes:core/v1:Namespace", "team-a")["provider"]
    steps = plan["steps"]
    policy = copy.deepcopy(next(s for s in steps if s["newState"]["type"] == RELEASE))
    policy["newState"].update(
        urn=policy["newState"]["urn"].replace(RELEASE, "kubernetes:nvidia.com/v1:ClusterPolicy"),
        type="kubernetes:nvidia.com/v1:ClusterPolicy",
        provider=k8s,
        inputs={
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"dcgmExporter": {"enabled": True}},
        },
    )
    steps.append(policy)
    _, report, _, _ = review_files(tmp_path, plan)
    whats = [item["what"] for item in report["notEvaluated"]]
    assert "ClusterPolicy kube-prometheus-stack" in whats
    assert any("DCGM exporter" in item["why"] for item in report["notEvaluated"])


def test_a_privileged_container_in_a_rendered_release_is_caught(tmp_path: Path) -> None:
    code, report, markdown, stdout = review_files(tmp_path, fsx_plan(), "--rendered", str(RENDERED))
    assert code == 1, stdout
    assert report["verdict"] == "fail"
    failed = {(f["ruleId"], f["urn"].rsplit("::", 1)[-1], f["message"]) for f in report["findings"]}
    assert ("k8s-no-privileged", NODE_PLUGIN, "container fsx-plugin is privileged") in failed
    assert (
        "k8s-no-host-path",
        NODE_PLUGIN,
        "volume kubelet-dir mounts host path /var/lib/kubelet",
    ) in failed
    # Only the DaemonSet holds a pod; the service account and CSIDriver are not workloads.
    assert {name for _, name, _ in failed if name.startswith("helm-aws-fsx-csi-driver:")} == {
        NODE_PLUGIN
    }
    privileged = next(f for f in report["findings"] if f["ruleId"] == "k8s-no-privileged")
    assert privileged["resourceType"] == "kubernetes:apps/v1:DaemonSet"
    assert privileged["urn"].endswith(
        "kubernetes:helm.sh/v3:Release$kubernetes:apps/v1:DaemonSet::" + NODE_PLUGIN
    )
    # The release counts as seen: nothing is left unevaluated.
    assert report["notEvaluated"] == []
    assert report["summary"]["renderedReleases"] == 1
    assert report["summary"]["renderedObjects"] == 3
    assert "(3 resources" not in markdown and "plus 3 objects rendered from 1 Helm release" in (
        markdown
    )
    assert "[k8s-no-privileged]" not in stdout and "k8s-no-privileged: 1" in stdout


def test_a_rendered_release_whose_findings_are_all_reviewed_passes_as_seen(
    tmp_path: Path,
) -> None:
    """A CSI node plugin needs privilege and host paths; with each need recorded as a
    reviewed, expiring exemption, the rendered release is seen and the review passes."""
    _, first, _, _ = review_files(tmp_path, fsx_plan(), "--rendered", str(RENDERED))
    needs = sorted({f["ruleId"] for f in first["findings"] if f["kind"] == "violation"})
    assert "k8s-no-privileged" in needs
    reviewed = {
        "resource": "helm-aws-fsx-csi-driver:*",
        "reason": "FSx CSI node plugin mounts volumes for pods (SEC-301)",
        "expires": "2099-12-31",
    }
    config = {rule_id: {"exemptions": [reviewed]} for rule_id in needs}
    code, report, markdown, stdout = review_files(
        tmp_path, fsx_plan(), "--rendered", str(RENDERED), config=config
    )
    assert code == 0, stdout
    assert report["verdict"] == "pass"
    assert "**Verdict: PASS**" in markdown
    assert report["notEvaluated"] == []
    rules = {r["id"]: r for r in report["rules"]}
    assert rules["k8s-no-privileged"]["evaluated"] == 3  # the plan's two pods and fsx-csi-node
    assert rules["k8s-no-privileged"]["exempted"] == 1
    assert {e["urn"].rsplit("::", 1)[-1] for e in report["exemptions"]} >= {NODE_PLUGIN}


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ({"kube-system/aws-fsx-csi-drive.yaml": "{}"}, "match(es) no Helm release"),
        ({"aws-fsx-csi-driver.yaml": "{}"}, "kube-system/aws-fsx-csi-driver.yaml"),
        ({"kube-system/aws-fsx-csi-driver.yaml": "kind: [\n"}, "not valid YAML at line"),
        ({"kube-system/aws-fsx-csi-driver.yaml": "- a\n- b\n"}, "document 1 is not a Kubernetes"),
    ],
)
def test_unusable_rendered_manifests_are_one_line_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    layout: dict[str, str],
    expected: str,
) -> None:
    rendered = tmp_path / "rendered"
    for name, text in layout.items():
        (rendered / name).parent.mkdir(parents=True, exist_ok=True)
        (rendered / name).write_text(text)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(fsx_plan()))
    assert main(["--plan", str(plan), "--rendered", str(rendered), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1
    assert not (tmp_path / "report.json").exists()


def test_a_missing_rendered_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(fsx_plan()))
    assert main(["--plan", str(plan), "--rendered", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_helm_inputs_render_in_the_layout_the_review_reads(tmp_path: Path) -> None:
    """helm_inputs writes the values and the helm template lines; running them (with a
    stand-in `helm` that records its arguments and prints the fixture) fills the layout
    `--rendered` reads, so every release is seen."""
    plan = fsx_plan()
    release = find_step(plan, RELEASE, "helm-aws-fsx-csi-driver")
    release["inputs"]["values"]["node"]["region"] = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    inputs = tmp_path / "inputs"
    assert helm_inputs_main(["--plan", str(plan_path), "--out", str(inputs)]) == 0
    [entry] = json.loads((inputs / "releases.json").read_text())
    assert entry == {
        "urn": release["urn"],
        "namespace": "kube-system",
        "name": "aws-fsx-csi-driver",
        "chart": "aws-fsx-csi-driver",
        "version": "1.17.0",
        "repo": "https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
        "values": "kube-system/aws-fsx-csi-driver.values.yaml",
        "rendered": "kube-system/aws-fsx-csi-driver.yaml",
    }
    values = yaml.safe_load((inputs / entry["values"]).read_text())
    expected = copy.deepcopy(FSX_INPUTS["values"])
    expected["node"]["region"] = "unknown-at-preview"
    assert values == expected
    # A stand-in helm: records its arguments, prints the hand-rendered fixture.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "helm"
    fixture = RENDERED / "kube-system" / "aws-fsx-csi-driver.yaml"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/helm-args\ncat {fixture}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    rendered = tmp_path / "rendered"
    subprocess.run(
        ["bash", str(inputs / "render.sh"), str(rendered)],
        check=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        timeout=60,
    )
    args = (tmp_path / "helm-args").read_text().split()
    assert args[:4] == ["template", "aws-fsx-csi-driver", "aws-fsx-csi-driver", "--namespace"]
    assert args[args.index("--version") + 1] == "1.17.0"
    assert args[args.index("--repo") + 1] == entry["repo"]
    assert Path(args[args.index("--values") + 1]) == (inputs / entry["values"]).resolve()
    assert "--skip-tests" in args
    code, report, _, _ = review_files(tmp_path, plan, "--rendered", str(rendered))
    assert code == 1 and report["notEvaluated"] == []


def test_make_review_passes_the_pack_config_and_rendered_dir() -> None:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        ["make", "-n", "review", "PLAN=p.json", "PACK_CONFIG=my config.json", "RENDERED=r"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    line = next(x for x in result.stdout.splitlines() if "policies.review" in x)
    assert '--plan "p.json" --policy-config "my config.json" --rendered "r"' in line
