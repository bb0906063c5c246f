"""The on-premises site's API audit policy: what onprem-ib's plan ships to the site's
cluster (the Policy and the kube-apiserver flags, in a kube-system ConfigMap valid for
the cluster's version), the API server's own validation of a Policy (ported from
Kubernetes, each check exercised), and the platform's (every request logged, no
credential bodies), each problem named with its key."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import yaml

from modules.k8s.site_audit.component import (
    CONFIGMAP_NAME,
    DIGEST_ANNOTATION,
    FLAGS_KEY,
    POLICY_KEY,
    audit_policy_configmap,
)
from modules.k8s.site_audit.spec import (
    DEFAULT_RULES,
    ApiAuditSpec,
    AuditRuleSpec,
    GroupResourcesSpec,
    flag_values,
    policy_errors,
)
from modules.validation import InvalidArgsError
from stacks.config_parsing import ConfigError
from tests.conftest import shipped_plan
from tests.stacks.test_fleet_config import NS, parsed
from tests.support.k8s_schema import schema_errors

STACK = "onprem-ib"


def shipped_configmap() -> tuple[Any, dict[str, Any]]:
    registrations, _ = shipped_plan(STACK)
    (record,) = [
        r
        for r in registrations.values()
        if r.type == "kubernetes:core/v1:ConfigMap"
        and r.inputs["metadata"]["name"] == CONFIGMAP_NAME
    ]
    return record, record.inputs


def test_the_site_cluster_holds_its_audit_policy_and_the_flags_that_apply_it() -> None:
    record, configmap = shipped_configmap()
    assert configmap["metadata"]["namespace"] == "kube-system"
    assert "$pulumi:providers:kubernetes::onprem-" in record.provider  # the site's cluster
    policy = yaml.safe_load(configmap["data"][POLICY_KEY])
    spec = parsed(STACK).api_audit
    assert spec is not None and policy == spec.document()
    assert policy_errors(policy) == []
    assert policy["rules"][-1] == {"level": "Metadata"}  # every request is logged
    digest = hashlib.sha256(configmap["data"][POLICY_KEY].encode()).hexdigest()
    assert configmap["metadata"]["annotations"][DIGEST_ANNOTATION] == digest
    flags = flag_values(configmap["data"][FLAGS_KEY].split())
    assert flags == {
        "audit-policy-file": "/etc/kubernetes/audit/policy.yaml",
        "audit-log-path": "/var/log/kubernetes/audit/audit.log",
        "audit-log-format": "json",
        "audit-log-maxage": "90",  # the stack file's maxAgeDays
        "audit-log-maxbackup": "20",
        "audit-log-maxsize": "100",
    }
    assert schema_errors([configmap], "1.32") == []


def test_credentials_are_logged_by_their_metadata_only() -> None:
    policy = ApiAuditSpec().document()
    first_match = {}
    for rule in policy["rules"]:
        for group in rule.get("resources", []):
            for resource in group.get("resources", []):
                first_match.setdefault((group["group"], resource), rule["level"])
    for key in (("", "secrets"), ("", "configmaps"), ("authentication.k8s.io", "tokenreviews")):
        assert first_match[key] == "Metadata", key


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"level": ""}, "rules[0].level: Required value"),
        ({"level": "Verbose"}, "rules[0].level: Unsupported value 'Verbose'"),
        ({"level": "None", "nonResourceURLs": ["healthz"]}, "must begin with a '/'"),
        ({"level": "None", "nonResourceURLs": ["/a*/b"]}, "must be the final character"),
        ({"level": "None", "resources": [{"group": "rbac.authorization.k8s.io/v1"}]}, "DNS-1123"),
        ({"level": "None", "resources": [{"group": "", "resourceNames": ["x"]}]}, "requires at"),
        ({"level": "None", "omitStages": ["Started"]}, "rules[0].omitStages[0]: 'Started'"),
        (
            {"level": "None", "nonResourceURLs": ["/metrics"], "namespaces": ["a"]},
            "cannot apply to both regular resources and non-resource URLs",
        ),
    ],
)
def test_the_api_servers_own_checks_of_a_policy(rule: dict[str, Any], fragment: str) -> None:
    errors = policy_errors({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [rule]})
    assert any(fragment in e for e in errors), errors
    assert policy_errors({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": []}) == []


def test_a_rule_reports_the_api_servers_problems_at_once() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        AuditRuleSpec(level="Verbose", non_resource_urls=("metrics",), omit_stages=("Done",))
    assert [p.field for p in raised.value.problems] == [
        "level",
        "non_resource_urls",
        "omit_stages",
    ]


def test_the_platforms_checks_refuse_lost_requests_and_credential_bodies() -> None:
    secrets_in_full = AuditRuleSpec(
        level="RequestResponse", resources=(GroupResourcesSpec("", ("secrets",)),)
    )
    everything_in_full = AuditRuleSpec(level="Request", verbs=("create",))
    with pytest.raises(InvalidArgsError) as raised:
        ApiAuditSpec(
            rules=(secrets_in_full, everything_in_full, AuditRuleSpec(level="None")),
            max_age_days=0,
            log_path="audit.log",
        )
    text = str(raised.value)
    assert "rules[2]: got {'level': 'None'}; the last rule must match every request" in text
    assert "rules[0].level: got 'RequestResponse'; would record credential bodies (secrets" in text
    assert "rules[1].level: got 'Request'; would record credential bodies (it lists no" in text
    assert "log_path: got 'audit.log'; an absolute path" in text
    assert "max_age_days: got 0; use 1 to 3650" in text
    assert len(raised.value.problems) == 5
    assert ApiAuditSpec().rules == DEFAULT_RULES


def test_config_problems_of_the_audit_section_are_named_with_their_keys() -> None:
    with pytest.raises(ConfigError) as raised:
        parsed(
            STACK,
            apiAudit={"rules": [{"level": "Metadata", "verbs": ["get"]}], "omitStages": ["Late"]},
        )
    problems = "\n".join(raised.value.problems)
    assert f"{NS}apiAudit.omitStages[0]: got 'Late'" in problems
    assert f"{NS}apiAudit.rules[0]: got" in problems and "the last rule must match" in problems
    with pytest.raises(ConfigError) as raised:
        parsed("uae-prod", apiAudit={})
    assert f"{NS}apiAudit: got 'apiAudit'; only for target onprem" in "\n".join(
        raised.value.problems
    )


def test_the_configmap_of_a_custom_policy_follows_the_spec() -> None:
    spec = ApiAuditSpec(
        rules=(
            AuditRuleSpec(
                level="RequestResponse", resources=(GroupResourcesSpec("batch", ("jobs",)),)
            ),
            AuditRuleSpec(level="Metadata"),
        ),
        omit_managed_fields=False,
    )
    configmap = audit_policy_configmap(spec)
    policy = yaml.safe_load(configmap["data"][POLICY_KEY])
    assert "omitManagedFields" not in policy
    assert policy["rules"][0]["resources"] == [{"group": "batch", "resources": ["jobs"]}]
