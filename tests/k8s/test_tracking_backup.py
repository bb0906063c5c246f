"""Scheduled backups of the on-premises tracking database (CloudNativePG, Barman Cloud)
to the site's object store: the objects against the vendored CloudNativePG v1.30.0 CRDs,
the settings' validation, every reference of the shipped onprem-ib plan followed to its
object (credentials, schedule, fence), the secret config's absence, and the recovery
runbook's objects and commands (docs/recovery.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pulumi
import pytest
import yaml

from modules.k8s.tracking import manifests as tracking
from modules.k8s.tracking.spec import DatabaseBackupSpec, TrackingInputs, TrackingSpec
from modules.validation import InvalidArgsError
from stacks.config import StackConfig, parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.kubernetes_layer import BACKUP_SECRET_KEYS, _backup_credentials
from stacks.offline_plan import load_stack_file
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import onprem_args
from tests.support.k8s_schema import schema_errors

ROOT = Path(__file__).resolve().parents[2]
BACKUP = DatabaseBackupSpec(
    destination_path="s3://gpu-platform-backups/mlflow-db",
    endpoint_url="https://objects.site.internal:9443",
    endpoint_cidrs=("10.20.8.0/24", "10.20.9.16/28"),
    endpoint_ca="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    retention_days=14,
    encryption="aws:kms",
)
SPEC = TrackingSpec(database_instances=3, database_backup=BACKUP, registry="registry.site.ae/gpu")


def onprem_config() -> StackConfig:
    config = parse_stack_config(load_stack_file("onprem-ib")[0])
    assert isinstance(config, StackConfig)
    return config


# -- the objects ---------------------------------------------------------------------------


def test_the_cluster_backs_up_compressed_encrypted_with_retention_to_the_site() -> None:
    cluster = tracking.database_cluster(SPEC, "ceph-rbd-encrypted")
    assert crd_errors([cluster]) == []
    backup = cluster["spec"]["backup"]
    store = backup["barmanObjectStore"]
    assert store["destinationPath"] == BACKUP.destination_path
    assert store["endpointURL"] == BACKUP.endpoint_url
    assert backup["retentionPolicy"] == "14d"
    for part in ("data", "wal"):
        assert store[part]["encryption"] == "aws:kms"
        assert store[part]["compression"] == "gzip"
    credentials = store["s3Credentials"]
    assert credentials["accessKeyId"] == {
        "name": tracking.BACKUP_CREDENTIALS_SECRET,
        "key": tracking.BACKUP_ACCESS_KEY_ID,
    }
    assert credentials["secretAccessKey"] == {
        "name": tracking.BACKUP_CREDENTIALS_SECRET,
        "key": tracking.BACKUP_SECRET_ACCESS_KEY,
    }
    assert "inheritFromIAMRole" not in credentials  # a site store: keys, no cloud role
    assert store["endpointCA"] == {"name": tracking.BACKUP_CA_SECRET, "key": "ca.crt"}
    ca = tracking.backup_ca_secret(BACKUP)
    assert ca["stringData"]["ca.crt"] == BACKUP.endpoint_ca
    secret = tracking.backup_credentials_secret("AKID", "SECRET")
    assert set(secret["stringData"]) == {
        tracking.BACKUP_ACCESS_KEY_ID,
        tracking.BACKUP_SECRET_ACCESS_KEY,
    }
    assert schema_errors([ca, secret], "1.33") == []


def test_without_backups_the_cluster_has_no_backup_section() -> None:
    cluster = tracking.database_cluster(replace(SPEC, database_backup=None), "ceph")
    assert "backup" not in cluster["spec"]
    # ...and without a CA the system CAs are used (no endpointCA to a missing Secret).
    plain = tracking.database_backup(replace(BACKUP, endpoint_ca=""))
    assert "endpointCA" not in plain["barmanObjectStore"]


def test_the_scheduled_backup_passes_the_vendored_crd_and_names_the_cluster() -> None:
    scheduled = tracking.scheduled_backup(BACKUP)
    assert crd_errors([scheduled]) == []
    assert scheduled["spec"]["cluster"] == {"name": tracking.DATABASE_CLUSTER}
    assert scheduled["spec"]["method"] == "barmanObjectStore"
    assert scheduled["spec"]["schedule"] == BACKUP.schedule
    # The vendored CRD and the six-field check refuse what CloudNativePG would.
    bad = json.loads(json.dumps(scheduled))
    bad["spec"]["method"] = "snapshot"
    bad["spec"]["schedule"] = "0 2 * * *"
    errors = crd_errors([bad])
    assert any("method" in e for e in errors) and any("six cron fields" in e for e in errors)
    cluster = tracking.database_cluster(SPEC, "ceph")
    cluster["spec"]["backup"]["retentionPolicy"] = "30 days"
    assert any("retentionPolicy" in e for e in crd_errors([cluster]))


def test_the_database_reaches_the_store_only_at_its_addresses_and_port() -> None:
    fenced = {
        p["metadata"]["name"]: p
        for p in tracking.server_network_policies(onprem_args().network, None, BACKUP)
    }
    policy = fenced["mlflow-database-backup"]["spec"]
    assert policy["podSelector"] == {"matchLabels": {"cnpg.io/cluster": "mlflow-db"}}
    (rule,) = policy["egress"]
    assert rule["to"] == [{"ipBlock": {"cidr": c}} for c in BACKUP.endpoint_cidrs]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9443}]
    without = tracking.server_network_policies(onprem_args().network, None, None)
    assert "mlflow-database-backup" not in {p["metadata"]["name"] for p in without}


def test_the_settings_report_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as caught:
        DatabaseBackupSpec(
            destination_path="gs://backups",
            endpoint_url="http://objects.site.internal/path",
            endpoint_cidrs=("0.0.0.0/0", "52.95.0.0/16", "not-a-cidr"),
            endpoint_ca="a certificate",
            schedule="0 2 * * *",
            retention_days=0,
            encryption="none",  # type: ignore[arg-type]
        )
    assert {p.field for p in caught.value.problems} == {
        "destination_path",
        "endpoint_url",
        "endpoint_cidrs[0]",
        "endpoint_cidrs[1]",
        "endpoint_cidrs[2]",
        "endpoint_ca",
        "schedule",
        "retention_days",
        "encryption",
    }
    with pytest.raises(InvalidArgsError, match="endpoint_cidrs"):
        DatabaseBackupSpec("s3://gpu-backups/db", "https://objects.site.internal", ())


def test_on_premises_backups_need_the_access_key() -> None:
    base = onprem_args()
    with pytest.raises(InvalidArgsError, match="backup_credentials"):
        replace(base, tracking=SPEC, tracking_inputs=TrackingInputs("pw"))
    args = replace(
        base,
        tracking=SPEC,
        tracking_inputs=TrackingInputs("pw", backup_credentials=("id", "key")),
    )
    assert args.tracking is not None and args.tracking.database_backup == BACKUP


# -- the stack file and its secrets ------------------------------------------------------


def test_a_stack_without_the_access_key_stops_with_both_keys_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The secret config as a stack where nobody ran ``pulumi config set --secret``
    (the runtime's config may hold an earlier in-process plan's stand-ins: replaced)."""
    given: dict[str, str] = {}
    monkeypatch.setattr(pulumi.Config, "get_secret", lambda _self, key: given.get(key))
    with pytest.raises(ConfigError) as caught:
        _backup_credentials(onprem_config())
    problems = caught.value.problems
    assert len(problems) == 2
    for key, problem in zip(BACKUP_SECRET_KEYS, problems, strict=True):
        assert f"pulumi config set --secret {key}" in problem
    given[BACKUP_SECRET_KEYS[0]] = "AKID"
    with pytest.raises(ConfigError) as caught:
        _backup_credentials(onprem_config())
    assert [BACKUP_SECRET_KEYS[1] in p for p in caught.value.problems] == [True]
    given[BACKUP_SECRET_KEYS[1]] = "SECRET"
    assert _backup_credentials(onprem_config()) == ("AKID", "SECRET")
    disabled = onprem_config()
    disabled = replace(disabled, tracking=replace(disabled.tracking, database_backup=None))
    assert _backup_credentials(disabled) is None


def test_an_aws_stack_refuses_database_backups_of_its_own() -> None:
    flat = dict(load_stack_file("uae-dev")[0])
    tracking_section = json.loads(flat.get("uae-gpu-platform:tracking", "{}"))
    tracking_section["databaseBackup"] = {
        "destinationPath": "s3://gpu-backups/db",
        "endpointUrl": "https://s3.me-central-1.amazonaws.com",
        "endpointCidrs": ["10.0.0.0/24"],
    }
    flat["uae-gpu-platform:tracking"] = json.dumps(tracking_section)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(flat)
    assert any("tracking.databaseBackup" in p and "only for target onprem" in p
               for p in caught.value.problems)  # fmt: skip


# -- the shipped onprem-ib plan ------------------------------------------------------------


def _registrations() -> list[Registration]:
    registrations, _ = shipped_plan("onprem-ib")
    return list(registrations.values())


def _object(kind: str, name: str) -> Registration:
    (found,) = [
        r
        for r in _registrations()
        if r.inputs.get("kind") == kind and r.inputs["metadata"]["name"] == name
    ]
    return found


def test_the_shipped_database_backs_up_as_its_stack_file_says() -> None:
    config = onprem_config()
    backup = config.tracking.database_backup
    assert backup is not None
    cluster = _object("Cluster", tracking.DATABASE_CLUSTER)
    assert cluster.protect
    assert cluster.inputs["spec"]["backup"] == tracking.database_backup(backup)
    store = cluster.inputs["spec"]["backup"]["barmanObjectStore"]
    assert urlsplit(store["endpointURL"]).scheme == "https"
    namespace = cluster.inputs["metadata"]["namespace"]
    # The credentials: a Secret of the same namespace holding both keys, as secrets.
    refs = store["s3Credentials"]
    (name,) = {ref["name"] for ref in refs.values()}
    secret = _object("Secret", name)
    assert secret.inputs["metadata"]["namespace"] == namespace
    assert {ref["key"] for ref in refs.values()} == set(secret.inputs["stringData"])
    assert set(secret.inputs["stringData"].values()) == {"[secret]"}
    assert secret.urn in cluster.dependencies  # the Secret exists before the cluster
    # The schedule names the cluster, in its namespace, and waits for it.
    scheduled = _object("ScheduledBackup", tracking.SCHEDULED_BACKUP)
    assert scheduled.inputs["metadata"]["namespace"] == namespace
    assert scheduled.inputs["spec"]["cluster"]["name"] == tracking.DATABASE_CLUSTER
    assert scheduled.inputs["spec"]["schedule"] == backup.schedule
    assert cluster.urn in scheduled.dependencies
    assert crd_errors([cluster.inputs, scheduled.inputs]) == []
    # The fence: the cluster's instances reach the store's addresses on its port.
    fence = _object("NetworkPolicy", "mlflow-database-backup").inputs
    assert fence["metadata"]["namespace"] == namespace
    labels = {"cnpg.io/cluster": tracking.DATABASE_CLUSTER}
    assert fence["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (rule,) = fence["spec"]["egress"]
    assert [p["ipBlock"]["cidr"] for p in rule["to"]] == list(backup.endpoint_cidrs)
    assert rule["ports"] == [
        {"protocol": "TCP", "port": urlsplit(store["endpointURL"]).port or 443}
    ]


# -- the recovery runbook (docs/recovery.md) -------------------------------------------------


def _runbook() -> str:
    page = (ROOT / "docs" / "recovery.md").read_text(encoding="utf-8")
    start = page.index("## On premises: the tracking database")
    return page[start : page.index("\n## ", start + 1)]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _runbook(), re.S)


def test_the_runbooks_settings_are_the_shipped_stacks() -> None:
    (settings, *_) = [yaml.safe_load(b) for b in _blocks("yaml")]
    section = settings["uae-gpu-platform:tracking"]["databaseBackup"]
    flat = dict(load_stack_file("onprem-ib")[0])
    shipped = json.loads(flat["uae-gpu-platform:tracking"])["databaseBackup"]
    assert {k: v for k, v in section.items() if k != "endpointCa"} == shipped


def test_the_runbooks_backup_and_restore_are_valid_and_name_the_shipped_objects() -> None:
    documents = [yaml.safe_load(b) for b in _blocks("yaml")[1:]]
    backup, restore = documents
    assert crd_errors([backup, restore]) == []
    assert backup["spec"]["cluster"]["name"] == tracking.DATABASE_CLUSTER
    shipped = _object("Cluster", tracking.DATABASE_CLUSTER).inputs
    store = shipped["spec"]["backup"]["barmanObjectStore"]
    (source,) = restore["spec"]["externalClusters"]
    assert restore["spec"]["bootstrap"]["recovery"]["source"] == source["name"]
    recovered = source["barmanObjectStore"]
    # The restore reads what the shipped cluster writes, with the same credentials.
    assert recovered["serverName"] == tracking.DATABASE_CLUSTER
    for key in ("destinationPath", "endpointURL", "s3Credentials"):
        assert recovered[key] == store[key], key
    for key in ("imageName", "enableSuperuserAccess"):
        assert restore["spec"][key] == shipped["spec"][key], key
    assert restore["spec"]["storage"]["storageClass"] == shipped["spec"]["storage"]["storageClass"]
    assert restore["metadata"]["name"] != tracking.DATABASE_CLUSTER  # next to it, never over


@pytest.mark.skipif(shutil.which("jq") is None, reason="the runbook's jq is not installed")
def test_the_runbooks_jq_gives_the_restore_the_databases_allowances() -> None:
    """The runbook's jq program, run on the shipped policies it names: each copy selects
    (and, for replication, admits) the restored cluster instead, and nothing else."""
    (script,) = [b for b in _blocks("bash") if "walk(" in b]
    program = re.search(r"restore='(.*?)'\n", script, re.S)
    assert program is not None
    names = re.findall(r"(mlflow|cnpg-system)/([a-z-]+)", script)
    assert len(names) == 4
    policies = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs
        for r in _registrations()
        if r.inputs.get("kind") == "NetworkPolicy"
    }
    for namespace, name in names:
        original = policies[(namespace, name)]
        result = subprocess.run(
            ["jq", program.group(1)],
            input=json.dumps(original),
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        copy = json.loads(result.stdout)
        assert copy["metadata"] == {"namespace": namespace, "name": f"{name}-restore"}
        text = json.dumps(copy["spec"])
        assert '"cnpg.io/cluster": "mlflow-db-restore"' in text
        assert '"cnpg.io/cluster": "mlflow-db"' not in text
        assert text.replace("mlflow-db-restore", "mlflow-db") == json.dumps(original["spec"])
        assert schema_errors([copy], "1.33") == []


def test_the_scheduled_backup_is_the_only_way_the_database_writes_out() -> None:
    """Besides its peers, the operator and the API server, the database's pods reach only
    the store: no policy of the plan opens anything else to them."""
    labels = {"cnpg.io/cluster": tracking.DATABASE_CLUSTER}
    config = onprem_config()
    assert config.onprem is not None and config.tracking.database_backup is not None
    allowed = {
        *config.onprem.api_server_cidrs,
        *config.tracking.database_backup.endpoint_cidrs,
    }
    for r in _registrations():
        if r.inputs.get("kind") != "NetworkPolicy" or r.inputs["metadata"]["namespace"] != "mlflow":
            continue
        selector = r.inputs["spec"]["podSelector"].get("matchLabels", {})
        if not selector.items() <= labels.items():
            continue
        for rule in r.inputs["spec"].get("egress", []):
            assert rule.get("to"), r.inputs["metadata"]["name"]
            for peer in rule["to"]:
                cidr = peer.get("ipBlock", {}).get("cidr")
                assert cidr is None or cidr in allowed, (r.inputs["metadata"]["name"], cidr)
