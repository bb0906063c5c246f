"""Every image the stack's Kubernetes objects run, pinned to the digest its registry holds.

A tag names an image for people; a digest names exactly one image. ``make pin-images
STACK=<stack>`` (`stacks.pin_images`) asks the stack's in-region ECR, with the caller's
credentials, which digest each image tag the stack runs points at now, and writes the
answers to ``stacks/images/<stack>.json``: the stack's image lock, committed beside its
stack file. While that file exists the program registers every image of its Kubernetes
objects (each container's ``image``, a TrainJob's or a SparkApplication's ``image``, a
CloudNativePG cluster's ``imageName``) as ``<repository>:<tag>@sha256:<digest>``
(`pin_transformation`): the kubelet pulls that digest whatever the tag points at later,
and scanners see an immutable reference (checkov's CKV_K8S_43). A stack with
``requireImageDigests: true`` stops without a lock, and stops at the first Kubernetes
object that names an image the lock does not hold, with one message naming it.

Not pinned: images a Helm chart's values name (each chart spells a digest its own way;
the residency review lists those releases), and images outside ECR (an on-premises
site's own registry), which `stacks.pin_images` cannot ask; it lists them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from .config_parsing import ConfigError

#: Where each stack's lock lives: ``<dir>/<stack>.json``.
LOCK_DIR = Path(__file__).resolve().parent / "images"
#: The field that marks a file as one of these locks (the command replaces no other).
LOCK_KIND = "uae-gpu-platform/image-lock"
#: The keys that name an image in a Kubernetes object: containers, TrainJob trainers and
#: SparkApplications (``image``), CloudNativePG clusters (``imageName``).
IMAGE_KEYS = ("image", "imageName")
ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/"
    r"(?P<repository>[a-z0-9][a-z0-9._/-]*):(?P<tag>[\w][\w.-]{0,127})$"
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: ECR's limit of image ids per DescribeImages call.
_BATCH = 100


class LockError(Exception):
    """A lock file that cannot be used, or a registry that cannot answer: one line."""


@dataclass(frozen=True)
class EcrImage:
    """One image reference in an ECR registry (``<account>.dkr.ecr.<region>...``)."""

    account: str
    region: str
    repository: str
    tag: str

    @property
    def key(self) -> str:
        """How the lock names it: ``<repository>:<tag>`` (the account is the lock's)."""
        return f"{self.repository}:{self.tag}"


def ecr_image(reference: str) -> EcrImage | None:
    """The parts of an ECR ``<host>/<repository>:<tag>`` reference; None for any other
    (another registry, no tag, or already pinned by digest)."""
    match = ECR_IMAGE.match(reference)
    if match is None:
        return None
    return EcrImage(**match.groupdict())


@dataclass(frozen=True)
class ImageLock:
    """A stack's image lock.

    Args:
        region: the registry's region (images of other regions are not pinned).
        account: the account whose registry answered (`pin-images`' caller).
        digests: ``<repository>:<tag>`` -> ``sha256:<hex>``.
        path: the file it was read from (for messages).
    """

    region: str
    account: str
    digests: Mapping[str, str]
    path: Path

    def digest(self, reference: str) -> str | None:
        """The locked digest of ``reference``, or None where the lock has none."""
        image = ecr_image(reference)
        if image is None or image.region != self.region:
            return None
        return self.digests.get(image.key)

    def pin(self, reference: str) -> str:
        """``reference@<digest>`` where the lock holds it; else ``reference`` itself."""
        digest = self.digest(reference)
        return f"{reference}@{digest}" if digest else reference


def image_references(value: Any) -> Iterator[str]:
    """Every image reference in a manifest (or any part of one): the string values of
    `IMAGE_KEYS`, wherever they are."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in IMAGE_KEYS and isinstance(item, str):
                yield item
            else:
                yield from image_references(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from image_references(item)


def pins(type_token: str) -> bool:
    """Whether the lock pins a resource of this type: every Kubernetes object, not a
    Helm release (its values are each chart's own)."""
    return type_token.startswith("kubernetes:") and not type_token.startswith("kubernetes:helm.sh/")


def object_images(resources: Iterable[tuple[str, Any]]) -> set[str]:
    """Every image reference the pinned resources (`pins`) among ``resources``, (type
    token, inputs) pairs, name."""
    return {
        ref
        for type_token, inputs in resources
        if pins(type_token)
        for ref in image_references(inputs)
    }


def pinned(value: Any, lock: ImageLock, unpinned: set[str]) -> Any:
    """``value`` with every image the lock holds pinned to its digest (a new structure;
    ``value`` unchanged); each image reference it could not pin is added to
    ``unpinned`` (one already pinned by digest is not)."""
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in IMAGE_KEYS and isinstance(item, str):
                out[key] = lock.pin(item)
                if "@" not in out[key]:
                    unpinned.add(item)
            else:
                out[key] = pinned(item, lock, unpinned)
        return out
    if isinstance(value, list):
        return [pinned(item, lock, unpinned) for item in value]
    return value


def pin_transformation(lock: ImageLock, required: bool) -> Any:
    """The stack transformation that registers every Kubernetes object with its images
    pinned (`pinned`); with ``required`` an image the lock does not hold ends the run
    with one message (`ConfigError`) naming it, before the object is registered. Helm
    releases pass unchanged (their values are each chart's own)."""

    def transform(args: pulumi.ResourceTransformationArgs) -> Any:
        if not pins(args.type_):
            return None
        unpinned: set[str] = set()
        props = pinned(args.props, lock, unpinned)
        if required and unpinned:
            raise ConfigError(
                [
                    f"requireImageDigests: {image} ({args.name}) is not in {lock.path.name}; "
                    f"mirror it, then run `make pin-images STACK={pulumi.get_stack()}`"
                    for image in sorted(unpinned)
                ]
            )
        return pulumi.ResourceTransformationResult(props, args.opts)

    return transform


def lock_path(stack: str, lock_dir: Path | None = None) -> Path:
    return (lock_dir or LOCK_DIR) / f"{stack}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LockError(f"{path}: not a readable image lock ({err})") from None
    if not isinstance(document, dict) or document.get("kind") != LOCK_KIND:
        raise LockError(f'{path}: not an image lock (no "kind": "{LOCK_KIND}")')
    return document


def load_lock(stack: str, lock_dir: Path | None = None) -> ImageLock | None:
    """The stack's lock, or None when it has none; `LockError` naming the file and the
    fix when the file is there but unusable."""
    path = lock_path(stack, lock_dir)
    if not path.exists():
        return None
    document = _read(path)
    fix = f"run `make pin-images STACK={stack}` again"
    region, account, digests = (
        document.get("region"),
        document.get("account"),
        document.get("digests"),
    )
    if not isinstance(region, str) or not isinstance(account, str):
        raise LockError(f"{path}: no region or account; {fix}")
    if not isinstance(digests, dict):
        raise LockError(f'{path}: "digests" is not an object; {fix}')
    for key, digest in digests.items():
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise LockError(f"{path}: {key} has no sha256 digest ({digest!r}); {fix}")
    return ImageLock(region=region, account=account, digests=dict(digests), path=path)


def lock_document(
    stack: str, region: str, account: str, digests: Mapping[str, str], retrieved: dt.datetime
) -> dict[str, Any]:
    """The lock file's content (keys sorted, so a re-pin changes only what moved)."""
    return {
        "kind": LOCK_KIND,
        "stack": stack,
        "region": region,
        "account": account,
        "retrieved": retrieved.replace(microsecond=0).isoformat(),
        "source": f"ECR DescribeImages in {region}, by `make pin-images STACK={stack}`",
        "digests": dict(sorted(digests.items())),
    }


def resolve(client: Any, images: Iterable[EcrImage]) -> tuple[dict[str, str], list[str]]:
    """Ask ECR for each image's digest: (``key`` -> digest, keys not found). One
    DescribeImages call per repository and hundred tags; a missing repository or tag is
    a miss, any other refusal raises (the caller reports it)."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for image in images:
        wanted.setdefault((image.account, image.repository), set()).add(image.tag)
    found: dict[str, str] = {}
    missing: list[str] = []
    for (account, repository), tags in sorted(wanted.items()):
        ordered = sorted(tags)
        for start in range(0, len(ordered), _BATCH):
            batch = ordered[start : start + _BATCH]
            try:
                answer = client.describe_images(
                    registryId=account,
                    repositoryName=repository,
                    imageIds=[{"imageTag": tag} for tag in batch],
                )
            except client.exceptions.RepositoryNotFoundException:
                missing += [f"{repository}:{tag} (no such repository)" for tag in batch]
                continue
            except client.exceptions.ImageNotFoundException:
                # One tag missing fails the whole call: ask for each tag alone.
                for tag in batch:
                    try:
                        one = client.describe_images(
                            registryId=account,
                            repositoryName=repository,
                            imageIds=[{"imageTag": tag}],
                        )
                    except client.exceptions.ImageNotFoundException:
                        missing.append(f"{repository}:{tag}")
                        continue
                    found[f"{repository}:{tag}"] = one["imageDetails"][0]["imageDigest"]
                continue
            for detail in answer["imageDetails"]:
                for tag in detail.get("imageTags") or []:
                    if tag in batch:
                        found[f"{repository}:{tag}"] = detail["imageDigest"]
            missing += [
                f"{repository}:{tag}" for tag in batch if f"{repository}:{tag}" not in found
            ]
    return found, missing


def check_replaceable(path: Path) -> None:
    """`LockError` when ``path`` holds something that is not an image lock (that file
    is someone's, and stays as it is)."""
    if path.exists():
        _read(path)


def write_lock(path: Path, document: Mapping[str, Any]) -> None:
    """Write the lock atomically; refuse to replace a file that is not a lock."""
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
