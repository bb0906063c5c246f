"""A CloudNativePG database backs up only inside the site (or an allowed region): the
rule ``uae-database-backups-in-site`` beside its compliant twins, against the shipped
on-premises plan, and with values unknown during preview."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stacks.offline_plan import SHIPPED_STACKS
from tests.policies.builder import compliant_plan, find_step
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.test_shipped_stacks import fresh

RULE = "uae-database-backups-in-site"
CLUSTER = "kubernetes:postgresql.cnpg.io/v1:Cluster"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SITE_STORE = "https://objects.ae-abudhabi-dc1.internal"
Plan = dict[str, Any]
#: The rules this module gives failing cases (test_rules checks every rule has one).
COVERED_RULE_IDS = frozenset({RULE})


def _store(**changes: Any) -> dict[str, Any]:
    store: dict[str, Any] = {
        "destinationPath": "s3://gpu-platform-backups/db",
        "endpointURL": SITE_STORE,
        "s3Credentials": {
            "accessKeyId": {"name": "db-backup", "key": "ACCESS_KEY_ID"},
            "secretAccessKey": {"name": "db-backup", "key": "ACCESS_SECRET_KEY"},
        },
        "data": {"compression": "gzip", "encryption": "AES256"},
        "wal": {"compression": "gzip", "encryption": "AES256"},
    }
    store.update(changes)
    return {k: v for k, v in store.items() if v is not None}


def _add(plan: Plan, kind: str, name: str, body: dict[str, Any]) -> None:
    template = find_step(plan, NAMESPACE, "team-a")
    state = copy.deepcopy(template)
    state.update(type=kind, urn=f"urn:pulumi:test::uae-gpu-platform::{kind}::{name}")
    state["inputs"] = body
    plan["steps"].append({"op": "create", "urn": state["urn"], "newState": state})


def _egress(cidr: str | None, port: int = 443) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
    if cidr is not None:
        rule["to"] = [{"ipBlock": {"cidr": cidr}}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "db-backup", "namespace": "team-a"},
        "spec": {
            "podSelector": {"matchLabels": {"cnpg.io/cluster": "db"}},
            "policyTypes": ["Egress"],
            "egress": [rule],
        },
    }


def plan_with(store: dict[str, Any] | None, egress: str | None = "10.20.8.0/24") -> Plan:
    """The compliant plan with a CloudNativePG cluster ``db`` in ``team-a`` backing up to
    ``store`` (none: no backup section), fenced to ``egress`` on 443."""
    plan = compliant_plan()
    spec: dict[str, Any] = {"instances": 2, "storage": {"size": "20Gi"}}
    if store is not None:
        spec["backup"] = {"barmanObjectStore": store, "retentionPolicy": "30d"}
    _add(
        plan,
        CLUSTER,
        "db",
        {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "db", "namespace": "team-a"},
            "spec": spec,
        },
    )
    _add(plan, POLICY, "db-backup", _egress(egress))
    return plan


# -- passing twins -------------------------------------------------------------------------


def test_a_site_store_the_database_can_reach_only_at_private_addresses_passes() -> None:
    result = review(plan_with(_store()))
    assert result.violations == []
    (evaluated,) = [r.evaluated for r in result.results if r.rule.id == RULE]
    assert evaluated == 1


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://s3.me-central-1.amazonaws.com",
        "https://gpu-backups.s3.me-central-1.amazonaws.com",
        "https://10.20.8.15:9000",
    ],
)
def test_an_s3_endpoint_in_region_or_a_private_address_passes(endpoint: str) -> None:
    assert failing_rules(plan_with(_store(endpointURL=endpoint))) == set()


def test_a_database_without_backups_is_not_this_rules() -> None:
    assert failing_rules(plan_with(None)) == set()


# -- failing twins ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "fragment"),
    [
        ("https://s3.eu-west-1.amazonaws.com", "in eu-west-1"),
        ("https://bucket.s3.me-south-1.amazonaws.com", "in me-south-1"),
        ("https://s3-eu-central-1.amazonaws.com", "in eu-central-1"),
        ("https://s3.amazonaws.com", "global endpoint"),
        # A bucket named like an allowed region, on S3 abroad: this rule's own copy took
        # the host's first region label (`policies.rules.checks` takes the last after it).
        ("https://me-central-1.s3.eu-west-1.amazonaws.com", "in eu-west-1"),
        ("https://storage.googleapis.com", "public object store"),
        ("https://backups.blob.core.windows.net", "public object store"),
        ("https://8.8.8.8", "not a private address"),
        ("http://objects.ae-abudhabi-dc1.internal", "without TLS"),
    ],
)
def test_a_store_outside_the_site_or_region_fails(endpoint: str, fragment: str) -> None:
    bad = plan_with(_store(endpointURL=endpoint))
    assert failing_rules(bad) == {RULE}
    (message,) = messages(bad, RULE)
    assert fragment in message, message


def test_no_endpoint_means_aws_s3s_default_and_fails() -> None:
    bad = plan_with(_store(endpointURL=None))
    (message,) = messages(bad, RULE)
    assert "`spec.backup.barmanObjectStore.endpointURL` is not set" in message


def test_azure_or_google_destinations_fail() -> None:
    azure = _store(
        destinationPath="https://acct.blob.core.windows.net/backups",
        azureCredentials={"storageAccount": {"name": "az", "key": "account"}},
        endpointURL=None,
    )
    found = messages(plan_with(azure), RULE)
    assert any("azureCredentials" in m for m in found)
    assert any("not an S3 bucket of the site" in m for m in found)
    google = _store(destinationPath="gs://backups/db")
    assert any("not an S3 bucket" in m for m in messages(plan_with(google), RULE))


@pytest.mark.parametrize(
    ("egress", "fragment"),
    [
        ("0.0.0.0/0", "not a private address range"),
        ("52.95.0.0/16", "not a private address range"),
        (None, "reach any address"),
    ],
)
def test_a_site_name_the_database_may_resolve_abroad_fails(
    egress: str | None, fragment: str
) -> None:
    """A name of the site is only as safe as the database's fence: with egress open to
    public addresses on the store's port, the name could lead anywhere."""
    bad = plan_with(_store(), egress=egress)
    assert failing_rules(bad) == {RULE}
    (message,) = messages(bad, RULE)
    assert "not confined to the site" in message and fragment in message


def test_a_fence_on_another_port_or_pod_does_not_open_the_store() -> None:
    plan = plan_with(_store(), egress="10.20.8.0/24")
    _add(plan, POLICY, "dns-anywhere", _egress("0.0.0.0/0", port=53))
    other = _egress("0.0.0.0/0")
    other["metadata"]["name"] = "other-app"
    other["spec"]["podSelector"] = {"matchLabels": {"app": "other"}}
    _add(plan, POLICY, "other-app", other)
    assert failing_rules(plan) == set()


def test_an_unknown_endpoint_cannot_be_checked_during_preview() -> None:
    plan = plan_with(_store(endpointURL=UNKNOWN))
    result = review(plan)
    assert result.violations == []
    assert [f.rule_id for f in result.findings if f.unknown] == [RULE]


# -- the shipped plans ---------------------------------------------------------------------


def _shipped(stack: str) -> Plan:
    return fresh(stack)


def test_the_onprem_database_backs_up_in_the_site_and_a_store_abroad_would_fail() -> None:
    plan = _shipped("onprem-ib")
    assert RULE not in failing_rules(plan)
    (cluster,) = [
        s["newState"]
        for s in plan["steps"]
        if s["newState"]["type"] == CLUSTER
        and s["newState"]["inputs"]["metadata"]["name"] == "mlflow-db"
    ]
    cluster["inputs"]["spec"]["backup"]["barmanObjectStore"]["endpointURL"] = (
        "https://s3.eu-west-1.amazonaws.com"
    )
    assert RULE in failing_rules(plan)


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if s != "onprem-ib"])
def test_aws_stacks_run_no_database_this_rule_sees(stack: str) -> None:
    plan = _shipped(stack)
    assert not [s for s in plan["steps"] if s["newState"]["type"] == CLUSTER]
