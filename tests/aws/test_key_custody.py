"""Key custody ``hsm`` on the uae-dev stack: the plans of each stage (a CloudHSM cluster
the stack creates, one it references, an external key store, a connected store named
by id), what each plan holds and leaves out, that the policy review passes them, and
the config errors, all reported at once."""

from __future__ import annotations

import copy
import datetime
import functools
import json
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import PlanError, load_stack_file, plan_document, plan_registrations
from stacks.offline_runtime import Registration
from tests.policies.conftest import review

NS = "uae-gpu-platform:"
STACK = "uae-dev"
KEY = "aws:kms/key:Key"
STORE = "aws:kms/customKeyStore:CustomKeyStore"
CLUSTER = "aws:cloudhsmv2/cluster:Cluster"
HSM = "aws:cloudhsmv2/hsm:Hsm"
ENDPOINT_SERVICE = "com.amazonaws.vpce.me-central-1.vpce-svc-0123456789abcdef0"
EXTERNAL_KEYS = {"secrets": "kek-secrets", "storage": "kek-storage", "logs": "kek-logs"}


@functools.cache
def trust_anchor() -> str:
    """A self-signed CA certificate (PEM), as `customerCA.crt` would be."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uae-platform-hsm-ca")])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def cloudhsm(**store: Any) -> dict[str, Any]:
    return {"type": "cloudhsm", "trustAnchorCertificate": trust_anchor(), **store}


def external(**store: Any) -> dict[str, Any]:
    return {
        "type": "external",
        "proxyUriEndpoint": "https://xks.dc1.example.ae",
        "proxyUriPath": "/uae/kms/xks/v1",
        "proxyVpcEndpointServiceName": ENDPOINT_SERVICE,
        "proxySite": "ae-abudhabi-dc1",
        "proxyCountry": "AE",
        "proxyAddresses": ["10.60.0.0/24"],
        "externalKeyIds": EXTERNAL_KEYS,
        **store,
    }


def config_with(
    keys: dict[str, Any], secrets: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[str]]:
    config, secret_keys = load_stack_file(STACK)
    config[NS + "keys"] = json.dumps(keys)
    for name in secrets:
        config[NS + name] = f"{name}-value"
        secret_keys = [*secret_keys, NS + name]
    return config, secret_keys


@functools.cache
def _plan(keys_json: str, secrets: tuple[str, ...]) -> dict[str, Registration]:
    config, secret_keys = config_with(json.loads(keys_json), secrets)
    return plan_registrations(STACK, config, secret_keys)


def plan(keys: dict[str, Any], secrets: tuple[str, ...] = ()) -> dict[str, Registration]:
    return _plan(json.dumps(keys, sort_keys=True), secrets)


def of_type(registrations: dict[str, Registration], type_token: str) -> list[Registration]:
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def reviewed(keys: dict[str, Any], secrets: tuple[str, ...] = ()) -> Any:
    config, secret_keys = config_with(keys, secrets)
    return review(plan_document(plan(keys, secrets), config, secret_keys))


def private_subnets(registrations: dict[str, Registration]) -> dict[str, str]:
    return {
        s.id: s.inputs["availabilityZone"]
        for s in of_type(registrations, "aws:ec2/subnet:Subnet")
        if "kubernetes.io/role/internal-elb" in s.inputs.get("tags", {})
    }


CREATED = {"createCluster": True, "hsmCount": 2}


def test_stage_cluster_creates_the_vpc_cluster_and_hsms_and_nothing_that_needs_a_key() -> None:
    registrations = plan({"custody": "hsm", "stage": "cluster", "keyStore": cloudhsm(**CREATED)})
    (cluster,) = of_type(registrations, CLUSTER)
    assert cluster.protect and cluster.inputs["hsmType"] == "hsm2m.medium"
    subnets = private_subnets(registrations)
    assert sorted(subnets[s] for s in cluster.inputs["subnetIds"]) == [
        "me-central-1a",
        "me-central-1b",
    ]
    hsms = of_type(registrations, HSM)
    assert len(hsms) == 2 and all(h.protect for h in hsms)
    assert {subnets[h.inputs["subnetId"]] for h in hsms} == {"me-central-1a", "me-central-1b"}
    assert all(cluster.urn in h.property_dependencies["clusterId"] for h in hsms)
    types = {r.type for r in registrations.values()}
    for absent in (KEY, STORE, "aws:ec2/flowLog:FlowLog", "aws:eks/cluster:Cluster"):
        assert absent not in types, absent
    assert not any(t.startswith(("kubernetes:", "aws:s3/", "aws:backup/")) for t in types)
    assert reviewed({"custody": "hsm", "stage": "cluster", "keyStore": cloudhsm(**CREATED)}).passed


def test_stage_key_store_adds_the_store_on_the_created_cluster() -> None:
    keys = {"custody": "hsm", "stage": "key-store", "keyStore": cloudhsm(**CREATED)}
    registrations = plan(keys, ("keyStorePassword",))
    (cluster,) = of_type(registrations, CLUSTER)
    (store,) = of_type(registrations, STORE)
    assert store.protect
    assert store.inputs["customKeyStoreType"] == "AWS_CLOUDHSM"
    assert store.inputs["customKeyStoreName"] == "gpu-uae-dev"
    assert store.inputs["trustAnchorCertificate"] == trust_anchor()
    assert store.inputs["keyStorePassword"] == "[secret]"
    assert cluster.urn in store.property_dependencies["cloudHsmClusterId"]
    assert {h.urn for h in of_type(registrations, HSM)} <= set(store.dependencies)
    assert of_type(registrations, KEY) == []
    assert reviewed(keys, ("keyStorePassword",)).passed


def test_stage_keys_puts_every_key_in_the_store_and_builds_the_platform() -> None:
    keys = {"custody": "hsm", "keyStore": cloudhsm(**CREATED)}
    registrations = plan(keys, ("keyStorePassword",))
    (store,) = of_type(registrations, STORE)
    created = of_type(registrations, KEY)
    assert len(created) == 3
    for key in created:
        assert store.urn in key.property_dependencies["customKeyStoreId"], key.name
        assert key.inputs["enableKeyRotation"] is False
        assert key.inputs["customerMasterKeySpec"] == "SYMMETRIC_DEFAULT"
        assert key.inputs["keyUsage"] == "ENCRYPT_DECRYPT"
        assert key.inputs["multiRegion"] is False and key.protect
        assert "xksKeyId" not in key.inputs
    # The flow logs come once the logs key exists, encrypted with it.
    (group,) = [
        g
        for g in of_type(registrations, "aws:cloudwatch/logGroup:LogGroup")
        if g.inputs["name"].endswith("vpc-flow-logs")
    ]
    (logs_key,) = [k for k in created if k.name == "keys-logs"]
    assert logs_key.urn in group.property_dependencies["kmsKeyId"]
    assert len(of_type(registrations, "aws:ec2/flowLog:FlowLog")) == 1
    assert of_type(registrations, "aws:eks/cluster:Cluster")
    result = reviewed(keys, ("keyStorePassword",))
    assert result.passed
    # Only the chart-image advisories every shipped plan has (docs/compliance.md).
    assert {f.rule_id for f in result.violations} == {"uae-helm-chart-images"}


def test_an_existing_cluster_gets_a_store_and_no_cluster_of_the_stacks() -> None:
    keys = {"custody": "hsm", "keyStore": cloudhsm(clusterId="cluster-jxhlf7644ne")}
    registrations = plan(keys, ("keyStorePassword",))
    assert of_type(registrations, CLUSTER) == [] and of_type(registrations, HSM) == []
    (store,) = of_type(registrations, STORE)
    assert store.inputs["cloudHsmClusterId"] == "cluster-jxhlf7644ne"
    assert all(
        store.urn in k.property_dependencies["customKeyStoreId"]
        for k in of_type(registrations, KEY)
    )
    assert reviewed(keys, ("keyStorePassword",)).passed


def test_an_external_store_is_reached_through_the_endpoint_service_only() -> None:
    secrets = ("xksProxyAccessKeyId", "xksProxySecretAccessKey")
    keys = {"custody": "hsm", "keyStore": external()}
    registrations = plan(keys, secrets)
    (store,) = of_type(registrations, STORE)
    assert store.inputs["customKeyStoreType"] == "EXTERNAL_KEY_STORE"
    assert store.inputs["xksProxyConnectivity"] == "VPC_ENDPOINT_SERVICE"
    assert store.inputs["xksProxyVpcEndpointServiceName"] == ENDPOINT_SERVICE
    assert store.inputs["xksProxyUriEndpoint"] == "https://xks.dc1.example.ae"
    assert store.inputs["xksProxyUriPath"] == "/uae/kms/xks/v1"
    assert store.inputs["xksProxyAuthenticationCredential"] == {
        "accessKeyId": "[secret]",
        "rawSecretAccessKey": "[secret]",
    }
    by_purpose = {k.name.removeprefix("keys-"): k.inputs for k in of_type(registrations, KEY)}
    assert {p: k["xksKeyId"] for p, k in by_purpose.items()} == EXTERNAL_KEYS
    assert reviewed(keys, secrets).passed


def test_a_connected_store_named_by_id_is_used_as_is() -> None:
    keys = {"custody": "hsm", "keyStore": {"type": "cloudhsm", "id": "cks-5ebd4ef395a96288e"}}
    registrations = plan(keys)
    assert of_type(registrations, STORE) == []
    assert {k.inputs["customKeyStoreId"] for k in of_type(registrations, KEY)} == {
        "cks-5ebd4ef395a96288e"
    }
    assert reviewed(keys).passed


def test_a_plan_whose_key_leaves_the_store_fails_the_review() -> None:
    """The rule reads custody from the plan's config: a standard key in an hsm stack."""
    keys = {"custody": "hsm", "keyStore": {"type": "cloudhsm", "id": "cks-5ebd4ef395a96288e"}}
    config, secret_keys = config_with(keys)
    # A deep copy: the plan document shares its inputs with the cached registrations.
    document = copy.deepcopy(plan_document(plan(keys), config, secret_keys))
    for step in document["steps"]:
        if step["newState"]["type"] == KEY and step["urn"].endswith("::keys-logs"):
            del step["newState"]["inputs"]["customKeyStoreId"]
            step["newState"]["inputs"]["enableKeyRotation"] = True
    result = review(document)
    assert not result.passed
    assert {f.rule_id for f in result.violations} - {"uae-helm-chart-images"} == {
        "aws-kms-key-custody"
    }


@pytest.mark.parametrize(
    ("keys", "secrets", "missing"),
    [
        (
            {"custody": "hsm", "stage": "key-store", "keyStore": cloudhsm(**CREATED)},
            (),
            ["keyStorePassword"],
        ),
        (
            {"custody": "hsm", "keyStore": external()},
            ("xksProxyAccessKeyId",),
            ["xksProxySecretAccessKey"],
        ),
    ],
    ids=["cloudhsm-password", "xks-secret"],
)
def test_a_missing_key_store_secret_is_named_with_the_command_to_set_it(
    keys: dict[str, Any], secrets: tuple[str, ...], missing: list[str]
) -> None:
    config, secret_keys = config_with(keys, secrets)
    with pytest.raises(PlanError) as caught:
        plan_registrations(STACK, config, secret_keys)
    for name in missing:
        assert f"{NS}{name}: missing" in str(caught.value)
        assert f"pulumi config set --secret {name}" in str(caught.value)


def problems(**sections: Any) -> list[str]:
    config, _ = load_stack_file(STACK)
    for key, value in sections.items():
        config[NS + key] = json.dumps(value)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return caught.value.problems


def test_key_store_problems_are_reported_together_naming_each_key() -> None:
    found = problems(
        keys={
            "custody": "hsm",
            "stage": "cluster",
            "keyStore": {
                "type": "cloudhsm",
                "clusterId": "cluster-jxhlf7644ne",
                "createCluster": True,
                "hsmCount": 1,
                "trustAnchorCertificate": "not a certificate",
                "proxySite": "dc1",
            },
        }
    )
    text = "\n".join(found)
    assert f"{NS}keys.keyStore.clusterId: got 'cluster-jxhlf7644ne'; give exactly one of" in text
    assert f"{NS}keys.keyStore.hsmCount: got 1; use 2 or more" in text
    assert f"{NS}keys.keyStore.trustAnchorCertificate" in text and "PEM" in text
    assert f"{NS}keys.keyStore.proxySite: got 'dc1'; only for type external" in text


def test_external_store_problems_name_each_setting() -> None:
    found = problems(
        keys={
            "custody": "hsm",
            "keyStore": external(
                proxyUriEndpoint="http://xks.example.ae/path",
                proxyUriPath="/kms/xks/v2",
                proxyCountry="BH",
                proxyAddresses=["8.8.8.0/24"],
                externalKeyIds={"secrets": "a"},
            ),
        }
    )
    text = "\n".join(found)
    for fragment in (
        "keys.keyStore.proxyUriEndpoint: got 'http://xks.example.ae/path'; expected https://",
        "keys.keyStore.proxyUriPath: got '/kms/xks/v2'; expected a path ending in /kms/xks/v1",
        "keys.keyStore.proxyCountry: got 'BH'; the proxy and its key manager must run in AE",
        "keys.keyStore.proxyAddresses[0]: got '8.8.8.0/24'; expected a private CIDR",
        "keys.keyStore.externalKeyIds: got ['secrets']; give the external key id of each",
    ):
        assert f"{NS}{fragment}" in text, fragment


def test_the_endpoint_service_must_be_in_the_stacks_region() -> None:
    abroad = "com.amazonaws.vpce.eu-west-1.vpce-svc-0123456789abcdef0"
    found = problems(
        keys={"custody": "hsm", "keyStore": external(proxyVpcEndpointServiceName=abroad)}
    )
    assert found == [
        f"{NS}keys.keyStore.proxyVpcEndpointServiceName: got '{abroad}'; the endpoint service "
        "must be in the stack's region me-central-1"
    ]
    public = problems(
        keys={"custody": "hsm", "keyStore": external(proxyVpcEndpointServiceName=None)}
    )
    assert "a public endpoint is not offered" in public[0]


def test_custody_and_stage_mismatches_are_refused() -> None:
    assert problems(keys={"custody": "hsm"}) == [
        f"{NS}keys.keyStore: got None; custody hsm needs keyStore: type cloudhsm or external "
        "(docs/compliance.md)"
    ]
    found = "\n".join(problems(keys={"custody": "standard", "stage": "key-store"}))
    assert f"{NS}keys.stage: got 'key-store'; only with custody hsm" in found
    found = "\n".join(
        problems(
            keys={
                "custody": "hsm",
                "stage": "cluster",
                "keyStore": cloudhsm(clusterId="cluster-jxhlf7644ne"),
            }
        )
    )
    assert "stage cluster is for a cluster the stack creates" in found
    found = "\n".join(
        problems(keys={"custody": "hsm", "keyStore": cloudhsm(**{**CREATED, "hsmCount": 3})})
    )
    assert (
        f"{NS}keys.keyStore.hsmCount: got 3; one HSM per zone: at most network.zoneCount (2)"
        in found
    )
    found = "\n".join(
        problems(
            keys={
                "custody": "hsm",
                "stage": "key-store",
                "keyStore": {"type": "cloudhsm", "createCluster": True},
            }
        )
    )
    assert (
        f"{NS}keys.keyStore.trustAnchorCertificate: got None; creating a CloudHSM key store"
        in found
    )


def test_an_onprem_stack_takes_no_keys_or_backup_section() -> None:
    config, _ = load_stack_file("onprem-ib")
    config[NS + "keys"] = json.dumps({"custody": "standard"})
    config[NS + "backup"] = json.dumps({"retentionDays": 35})
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    assert sorted(caught.value.problems) == [
        f"{NS}backup: got '(given)'; only for target aws (an onprem site holds its own keys "
        "and backups)",
        f"{NS}keys: got '(given)'; only for target aws (an onprem site holds its own keys "
        "and backups)",
    ]


def test_hsms_take_one_zone_each_in_the_vpcs_order() -> None:
    from modules.aws.key_custody import hsm_zones  # noqa: PLC0415

    zones = ("me-central-1a", "me-central-1b", "me-central-1c")
    assert hsm_zones(zones, 2) == ("me-central-1a", "me-central-1b")
    assert hsm_zones(zones, 3) == zones
    with pytest.raises(ValueError, match="4 HSMs need 4 zones; the VPC has 3"):
        hsm_zones(zones, 4)
