"""`python -m stacks.bootstrap --custom-key-store-id ...` (key custody hsm) against moto.

moto implements neither custom key stores nor keys in them: it answers no
``DescribeCustomKeyStores`` and ignores ``CustomKeyStoreId`` in ``CreateKey``. So these
tests answer ``DescribeCustomKeyStores`` themselves (a botocore ``before-call`` handler,
in the shape of the KMS API reference) and check what the bootstrap *sends*: the
``CreateKey`` parameters, after botocore has validated them against the KMS API model,
and that ``EnableKeyRotation`` is never called for keys in a store. A second run over
keys in a store is not exercised: moto cannot report a key's store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from stacks.bootstrap import __main__ as bootstrap
from stacks.bootstrap.names import Names
from tests.support.moto_env import fake_aws_credentials

REGION = "me-central-1"
NAMES = Names("123456789012", REGION)
STORE = "cks-0123456789abcdef0"
XKS = ["--xks-key-id", "state=kek-state", "--xks-key-id", "secrets=kek-secrets"]
XKS += ["--xks-key-id", "trail=kek-trail"]


class Recorder:
    """A boto3 session whose KMS calls are recorded, with a custom key store answered."""

    def __init__(self, store_type: str = "AWS_CLOUDHSM", state: str = "CONNECTED") -> None:
        self.session = boto3.session.Session()
        self.store = {
            "CustomKeyStoreId": STORE,
            "CustomKeyStoreName": "uae-hsm",
            "CustomKeyStoreType": store_type,
            "ConnectionState": state,
        }
        self.created: list[dict[str, Any]] = []
        self.rotations: list[str] = []
        events = self.session.events
        events.register("before-call.kms.DescribeCustomKeyStores", self._describe_stores)
        events.register("before-parameter-build.kms.CreateKey", self._create_key)
        events.register("before-parameter-build.kms.EnableKeyRotation", self._rotation)

    def _describe_stores(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, Any]:
        # `params` is the serialized request: KMS speaks JSON.
        body = params["body"]
        asked = json.loads(body.decode() if isinstance(body, bytes) else body).get(
            "CustomKeyStoreId"
        )
        found = [self.store] if asked == STORE else []
        return AWSResponse(None, 200, {}, None), {"CustomKeyStores": found}

    def _create_key(self, params: dict[str, Any], **_: Any) -> None:
        self.created.append(dict(params))

    def _rotation(self, params: dict[str, Any], **_: Any) -> None:
        self.rotations.append(params["KeyId"])


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fake_aws_credentials(monkeypatch)
    with mock_aws():
        yield


def run(monkeypatch: pytest.MonkeyPatch, recorder: Recorder, *args: str) -> int:
    monkeypatch.setattr(bootstrap.boto3.session, "Session", lambda: recorder.session)
    return bootstrap.main(list(args))


def keys_in_moto() -> list[str]:
    return [k["KeyId"] for k in boto3.client("kms", region_name=REGION).list_keys()["Keys"]]


def test_keys_go_into_a_connected_cloudhsm_store_without_rotation(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder()
    assert run(monkeypatch, recorder, "--custom-key-store-id", STORE) == 0
    descriptions = [c["Description"] for c in recorder.created]
    assert len(descriptions) == 3 and len(keys_in_moto()) == 3
    for params in recorder.created:
        assert params["CustomKeyStoreId"] == STORE
        assert params["Origin"] == "AWS_CLOUDHSM"
        assert "XksKeyId" not in params
        assert params["KeySpec"] == "SYMMETRIC_DEFAULT"
        assert params["KeyUsage"] == "ENCRYPT_DECRYPT"
        assert params["MultiRegion"] is False
    assert recorder.rotations == []  # KMS cannot rotate keys in a custom key store
    out = capsys.readouterr().out
    for alias in (NAMES.state_key_alias, NAMES.secrets_key_alias, NAMES.trail_key_alias):
        (line,) = [line for line in out.splitlines() if f" {alias} " in line]
        assert line.split()[0] == "created" and line.endswith(f"(in {STORE})"), line


def test_an_external_store_binds_each_key_to_its_external_key(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder("EXTERNAL_KEY_STORE")
    assert run(monkeypatch, recorder, "--custom-key-store-id", STORE, *XKS) == 0
    by_description = {c["Description"].split(" (")[0]: c for c in recorder.created}
    assert {d: c["XksKeyId"] for d, c in by_description.items()} == {
        "Pulumi state bucket": "kek-state",
        "Pulumi stack secrets, awskms secrets provider": "kek-secrets",
        "Account trail log files and log group": "kek-trail",
    }
    assert {c["Origin"] for c in recorder.created} == {"EXTERNAL_KEY_STORE"}
    assert recorder.rotations == []


def test_without_a_store_the_keys_rotate_in_aws_kms(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    assert run(monkeypatch, recorder) == 0
    assert all("CustomKeyStoreId" not in c and "Origin" not in c for c in recorder.created)
    assert len(recorder.rotations) == 3


@pytest.mark.parametrize(
    ("recorder", "args", "message"),
    [
        (
            Recorder(state="DISCONNECTED"),
            ("--custom-key-store-id", STORE),
            f"custom key store {STORE} is DISCONNECTED, not CONNECTED: connect it "
            f"(aws kms connect-custom-key-store --custom-key-store-id {STORE})",
        ),
        (
            Recorder("EXTERNAL_KEY_STORE"),
            ("--custom-key-store-id", STORE),
            "is an external key store: pass --xks-key-id state=<id>",
        ),
        (
            Recorder(),
            ("--custom-key-store-id", STORE, *XKS),
            "is a CloudHSM key store: --xks-key-id is only for an external key store",
        ),
        (
            Recorder(),
            ("--custom-key-store-id", "cks-00000000000000000"),
            "custom key store cks-00000000000000000 was not found in me-central-1",
        ),
    ],
    ids=["disconnected", "external-without-keys", "cloudhsm-with-xks-keys", "unknown-store"],
)
def test_a_store_that_cannot_take_keys_is_one_message_and_nothing_is_made(  # noqa: PLR0917
    aws: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    recorder: Recorder,
    args: tuple[str, ...],
    message: str,
) -> None:
    assert run(monkeypatch, recorder, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert keys_in_moto() == [] and recorder.created == []


def test_keys_already_in_aws_kms_are_not_moved_into_a_store(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, Recorder()) == 0
    existing = sorted(keys_in_moto())
    capsys.readouterr()
    assert run(monkeypatch, Recorder(), "--custom-key-store-id", STORE) == 2
    err = capsys.readouterr().err
    assert f"is held in AWS KMS, not in {STORE}" in err
    assert "a key cannot move between AWS KMS and a custom key store" in err
    assert sorted(keys_in_moto()) == existing


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--custom-key-store-id", "cks-1"), "is not a key store id (cks-<17 hex>)"),
        (XKS, "--xks-key-id is only used with --custom-key-store-id"),
        (
            ("--custom-key-store-id", STORE, "--xks-key-id", "state=kek-state"),
            "missing secrets, trail",
        ),
        (
            ("--custom-key-store-id", STORE, "--xks-key-id", "logs=kek"),
            "is not PURPOSE=ID with PURPOSE one of state, secrets, trail",
        ),
    ],
    ids=["bad-store-id", "xks-without-store", "missing-purposes", "unknown-purpose"],
)
def test_unusable_key_store_arguments_are_refused_before_any_call(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], problem: str
) -> None:
    assert bootstrap.main(list(args)) == 2
    assert problem in capsys.readouterr().err
