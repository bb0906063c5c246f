"""The stack's image lock: `make pin-images` against ECR (moto's), and the program
registering every Kubernetes object's images pinned by it."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from stacks import image_lock, pin_images
from stacks.offline_plan import PlanError, build_plan, load_stack_file, plan_registrations
from stacks.plan_summary import image_lines

STACK = "smb-cpu"  # the smallest shipped plan
REGION = "me-central-1"
HOST = f"123456789012.dkr.ecr.{REGION}.amazonaws.com"
DIGEST = "sha256:" + "ab" * 32


def _lock(path: Path, digests: dict[str, str], region: str = REGION) -> image_lock.ImageLock:
    return image_lock.ImageLock(region=region, account="123456789012", digests=digests, path=path)


def test_only_an_ecr_image_of_the_locks_region_and_tag_is_pinned(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "x.json", {"gpu-a/training:0.1.0": DIGEST})
    assert lock.pin(f"{HOST}/gpu-a/training:0.1.0") == f"{HOST}/gpu-a/training:0.1.0@{DIGEST}"
    for unchanged in (
        f"{HOST}/gpu-a/training:0.2.0",  # another tag
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com/gpu-a/training:0.1.0",  # region
        f"{HOST}/gpu-a/training:0.1.0@{DIGEST}",  # already pinned
        "registry.site.ae/gpu-a/training:0.1.0",  # not ECR
    ):
        assert lock.pin(unchanged) == unchanged


def test_pinning_reaches_every_image_key_and_names_what_it_could_not(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "x.json", {"gpu-a/training:0.1.0": DIGEST})
    manifest: dict[str, Any] = {
        "kind": "TrainJob",
        "spec": {
            "trainer": {"image": f"{HOST}/gpu-a/training:0.1.0"},
            "template": {"containers": [{"name": "c", "image": f"{HOST}/gpu-a/other:1"}]},
            "imageName": f"{HOST}/gpu-a/training:0.1.0",
        },
    }
    unpinned: set[str] = set()
    out = image_lock.pinned(manifest, lock, unpinned)
    assert out["spec"]["trainer"]["image"].endswith(f"@{DIGEST}")
    assert out["spec"]["imageName"].endswith(f"@{DIGEST}")
    assert unpinned == {f"{HOST}/gpu-a/other:1"}
    assert manifest["spec"]["trainer"]["image"] == f"{HOST}/gpu-a/training:0.1.0"  # untouched


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a readable image lock"),
        ('{"digests": {}}', "not an image lock"),
        (
            json.dumps(
                {
                    "kind": image_lock.LOCK_KIND,
                    "region": REGION,
                    "account": "1",
                    "digests": {"a:1": "x"},
                }
            ),
            "a:1 has no sha256 digest",
        ),
    ],
    ids=["broken-json", "not-a-lock", "bad-digest"],
)
def test_a_broken_lock_is_named_with_the_fix(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / f"{STACK}.json").write_text(content)
    with pytest.raises(image_lock.LockError, match=message) as caught:
        image_lock.load_lock(STACK, tmp_path)
    assert str(tmp_path / f"{STACK}.json") in str(caught.value)


# -- make pin-images against ECR ----------------------------------------------------------


@pytest.fixture(scope="module")
def stack_images() -> list[str]:
    return pin_images.stack_images(STACK)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield boto3.client("ecr", region_name=REGION)


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch, stack_images: list[str]) -> list[str]:
    """`pin_images.stack_images` answering from the module's one plan of the stack (the
    real path runs in `test_pin_images_writes_the_registrys_digest_of_every_image`)."""
    monkeypatch.setattr(pin_images, "stack_images", lambda stack: list(stack_images))
    return stack_images


def _manifest(reference: str, build: int = 1) -> str:
    """A one-layer image manifest, distinct per reference and build (moto derives the
    digest from the layers)."""
    layer = "sha256:" + hashlib.sha256(f"{reference}#{build}".encode()).hexdigest()
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"digest": "sha256:" + "0" * 64, "size": build, "mediaType": "x"},
            "layers": [{"digest": layer, "size": len(reference), "mediaType": "x"}],
            "annotations": {"ref": reference},
        }
    )


def _push(client: Any, reference: str, build: int = 1) -> str:
    """Push an image manifest for ``reference``; its digest as ECR gives it."""
    image = image_lock.ecr_image(reference)
    assert image is not None
    with contextlib.suppress(client.exceptions.RepositoryAlreadyExistsException):
        client.create_repository(repositoryName=image.repository)
    answer = client.put_image(
        repositoryName=image.repository,
        imageManifest=_manifest(reference, build),
        imageTag=image.tag,
    )
    return str(answer["image"]["imageId"]["imageDigest"])


def test_pin_images_writes_the_registrys_digest_of_every_image(
    registry: Any,
    stack_images: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pushed = {image_lock.ecr_image(ref).key: _push(registry, ref) for ref in stack_images}  # type: ignore[union-attr]
    out = tmp_path / "lock.json"
    assert pin_images.main([STACK, "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["digests"] == pushed
    assert document["kind"] == image_lock.LOCK_KIND and document["region"] == REGION
    assert f"{len(pushed)} image(s) pinned" in capsys.readouterr().out
    # Again, after a tag moved: only that digest changes; the file is the command's own.
    moved = stack_images[0]
    registry.batch_delete_image(
        repositoryName=image_lock.ecr_image(moved).repository,  # type: ignore[union-attr]
        imageIds=[{"imageTag": image_lock.ecr_image(moved).tag}],  # type: ignore[union-attr]
    )
    _push(registry, moved, build=2)
    monkeypatch.setattr(pin_images, "stack_images", lambda stack: list(stack_images))
    assert pin_images.main([STACK, "--out", str(out)]) == 0
    again = json.loads(out.read_text())["digests"]
    changed = {key for key in pushed if again[key] != pushed[key]}
    assert changed == {image_lock.ecr_image(moved).key}  # type: ignore[union-attr]


def test_a_missing_image_is_named_and_nothing_is_written(
    registry: Any, planned: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_images = planned
    for ref in stack_images[1:]:
        _push(registry, ref)
    out = tmp_path / "lock.json"
    assert pin_images.main([STACK, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert image_lock.ecr_image(stack_images[0]).key in err  # type: ignore[union-attr]
    assert "nothing written" in err and "Traceback" not in err
    assert not out.exists()


def test_pin_images_replaces_no_file_it_did_not_make(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    assert pin_images.main([STACK, "--out", str(notes)]) == 2
    assert "not an image lock" in capsys.readouterr().err
    assert notes.read_text() == '{"mine": true}\n'


def test_pin_images_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    planned: list[str],
) -> None:
    assert pin_images.main(["nowhere"]) == 2
    assert "no stack 'nowhere'" in capsys.readouterr().err
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert pin_images.main([STACK, "--out", str(tmp_path / "lock.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pin-images: no AWS credentials") and err.count("\n") == 1
    assert not (tmp_path / "lock.json").exists()


# -- the program with a lock ------------------------------------------------------------


def _kubernetes_images(plan: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for step in plan["steps"]:
        state = step.get("newState") or {}
        kind = str(state.get("type", ""))
        if kind.startswith("kubernetes:") and not kind.startswith("kubernetes:helm.sh/"):
            found.update(image_lock.image_references(state.get("inputs")))
    return found


def _write_lock(directory: Path, stack_images: list[str], drop: int = 0) -> None:
    digests = {
        image_lock.ecr_image(ref).key: DIGEST  # type: ignore[union-attr]
        for ref in stack_images[drop:]
    }
    document = image_lock.lock_document(STACK, REGION, "123456789012", digests, _NOW)
    image_lock.write_lock(image_lock.lock_path(STACK, directory), document)


_NOW = __import__("datetime").datetime(2026, 11, 29, tzinfo=__import__("datetime").UTC)


def test_with_a_lock_every_image_of_the_plan_is_pinned_by_digest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stack_images: list[str]
) -> None:
    _write_lock(tmp_path, stack_images)
    monkeypatch.setattr(image_lock, "LOCK_DIR", tmp_path)
    images = _kubernetes_images(build_plan(STACK))
    # What checkov's CKV_K8S_43 asks of each container: an image named by digest.
    assert images and all(ref.endswith(f"@{DIGEST}") for ref in images), sorted(images)
    assert {ref.split("@")[0] for ref in images} == set(stack_images)


def test_a_stack_that_requires_digests_refuses_a_missing_lock_or_an_unlocked_image(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stack_images: list[str]
) -> None:
    monkeypatch.setattr(image_lock, "LOCK_DIR", tmp_path)
    config, _ = load_stack_file(STACK)
    config = {**config, "uae-gpu-platform:requireImageDigests": "true"}
    with pytest.raises(PlanError, match=f"run `make pin-images STACK={STACK}`"):
        build_plan(STACK, config)
    _write_lock(tmp_path, stack_images, drop=1)
    with pytest.raises(PlanError) as caught:
        build_plan(STACK, config)
    assert stack_images[0] in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_make_plan_says_how_many_images_the_lock_pins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stack_images: list[str]
) -> None:
    monkeypatch.setattr(image_lock, "LOCK_DIR", tmp_path)
    config, secrets = load_stack_file(STACK)
    unlocked = image_lines(STACK, plan_registrations(STACK, config, secrets))
    assert unlocked[0].endswith(
        f"0 pinned by digest (no image lock: `make pin-images STACK={STACK}`)"
    )
    _write_lock(tmp_path, stack_images)
    locked = image_lines(STACK, plan_registrations(STACK, config, secrets))
    count = len(set(stack_images))
    assert f"{count} images named by the Kubernetes objects, {count} pinned by digest" in locked[0]
