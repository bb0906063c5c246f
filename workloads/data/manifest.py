"""Versioned datasets: ``manifest.json`` names every shard of a data directory by its
SHA-256, token count and size, and its digest is the dataset's version.

The Spark preprocessing job (`workloads.data.prepare`) writes it; the trainer verifies
it before step one (`verify_dataset`) and refuses a changed, missing or extra shard,
naming it. The standard library only: the training image has neither Spark nor pandas.

The digest is the first 32 hex digits (128 bits) of the SHA-256 of the manifest's
canonical JSON without its ``digest`` field. MLflow keeps dataset digests of at most 36
characters, and 128 bits name a version with no practical risk of collision. The
manifest holds no timestamp and no absolute path, so the same sources, settings and
pipeline give the same version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.data.shard_format import is_shard_name, read_header_bytes, unpack_header

MANIFEST = "manifest.json"
REPORT = "report.json"
#: What ``manifest.json``'s ``format`` field says; anything else is not our manifest.
FORMAT = "uae-platform-dataset/1"
DIGEST_HEX = 32
#: Problems listed in one refusal before "and N more".
_SHOWN = 8


class ManifestError(ValueError):
    """A data directory whose shards do not match its manifest, naming what differs."""


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(body: Mapping[str, Any]) -> str:
    """The dataset version: 128 bits of SHA-256 over the canonical JSON of ``body``
    without its ``digest`` field."""
    content = {key: value for key, value in body.items() if key != "digest"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:DIGEST_HEX]


@dataclass(frozen=True)
class DatasetRef:
    """How a run names the dataset it trained on.

    Args:
        name: the dataset's name (the output directory's name unless given).
        digest: the manifest digest, i.e. the dataset version.
        source: where the data directory is (a local path or a URI).
        shards: shard file names in the manifest, train and val.
    """

    name: str
    digest: str
    source: str
    shards: tuple[str, ...] = ()


def describe_shards(data_dir: Path) -> list[dict[str, Any]]:
    """The manifest's shard entries for every shard file of ``data_dir``, in name order:
    name, split, token count (from the header), size and SHA-256."""
    entries: list[dict[str, Any]] = []
    for path in sorted(data_dir.iterdir()):
        if not is_shard_name(path.name):
            continue
        header = unpack_header(read_header_bytes(path))
        entries.append(
            {
                "name": path.name,
                "split": path.name.split("_", 1)[0],
                "tokens": header.num_tokens if header is not None else 0,
                "bytes": path.stat().st_size,
                "sha256": file_sha256(path),
            }
        )
    return entries


def write_json_atomic(path: Path, body: Mapping[str, Any]) -> None:
    """Write ``body`` as indented JSON, atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_manifest(data_dir: Path, body: Mapping[str, Any]) -> str:
    """Write ``manifest.json`` with its digest filled in; returns the digest."""
    full = {"format": FORMAT, **body}
    digest = manifest_digest(full)
    write_json_atomic(data_dir / MANIFEST, {**full, "digest": digest})
    return digest


def load_manifest(data_dir: Path) -> dict[str, Any] | None:
    """The manifest of ``data_dir``; ``None`` when it has none.

    Raises:
        ManifestError: ``manifest.json`` exists but is not a dataset manifest.
    """
    path = data_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(f"{path}: not a readable dataset manifest ({err})") from err
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ManifestError(
            f"{path}: not a dataset manifest (its format is not {FORMAT!r}); remove it or "
            "re-create the dataset with `make data`"
        )
    shards = body.get("shards")
    if not isinstance(shards, list) or not all(
        isinstance(s, dict) and {"name", "sha256", "bytes"} <= s.keys() for s in shards
    ):
        raise ManifestError(f"{path}: its shard list is malformed; re-create the dataset")
    return body


def _refuse(data_dir: Path, problems: list[str]) -> ManifestError:
    shown = problems[:_SHOWN]
    more = f"\n  ... and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
    return ManifestError(
        f"the data directory {data_dir} does not match its {MANIFEST}:\n  "
        + "\n  ".join(shown)
        + more
        + "\nRe-create the dataset (`make data SOURCE=... OUT=...`) or restore the listed "
        "shards; the manifest's digest is the dataset version a run records."
    )


def verify_dataset(data_dir: Path, *, source: str | None = None) -> DatasetRef | None:
    """Check every shard of ``data_dir`` against its manifest; ``None`` when the
    directory has no manifest (shards made by `workloads.data.byte_tokenizer` or elsewhere).

    Every problem is collected before refusing: a manifest whose content no longer
    matches its digest, a listed shard that is missing or whose size or SHA-256 changed,
    and a shard file (``train_*.bin``, ``val_*.bin``) the manifest does not list.

    Raises:
        ManifestError: naming each changed, missing or extra shard.
    """
    body = load_manifest(data_dir)
    if body is None:
        return None
    problems: list[str] = []
    recorded = str(body.get("digest", ""))
    actual = manifest_digest(body)
    if recorded != actual:
        problems.append(
            f"{MANIFEST} was edited: it says version {recorded or '(none)'} but its content "
            f"hashes to {actual}"
        )
    listed: dict[str, Mapping[str, Any]] = {str(s["name"]): s for s in body["shards"]}
    for name, entry in sorted(listed.items()):
        path = data_dir / name
        if not path.is_file():
            problems.append(f"shard {name} is missing (the manifest lists it)")
            continue
        size = path.stat().st_size
        if size != int(entry["bytes"]):
            problems.append(
                f"shard {name} changed: {size} bytes, the manifest says {entry['bytes']}"
            )
            continue
        digest = file_sha256(path)
        if digest != entry["sha256"]:
            problems.append(
                f"shard {name} changed: sha256 {digest[:16]}..., the manifest says "
                f"{str(entry['sha256'])[:16]}..."
            )
    for path in sorted(data_dir.iterdir()):
        if is_shard_name(path.name) and path.name not in listed:
            problems.append(f"shard {path.name} is extra (not in the manifest)")
    if problems:
        raise _refuse(data_dir, problems)
    return DatasetRef(
        name=str(body.get("name", data_dir.name)),
        digest=recorded,
        source=source if source is not None else str(data_dir.resolve()),
        shards=tuple(sorted(listed)),
    )


def foreign_entries(data_dir: Path) -> list[str]:
    """The entries of ``data_dir`` that an earlier run of the job did not write (its
    manifest, its report and the shards the manifest lists); every entry when it has no
    readable manifest. Empty means the directory may be replaced."""
    entries = sorted(path.name for path in data_dir.iterdir())
    try:
        body = load_manifest(data_dir)
    except ManifestError:
        body = None
    if body is None:
        return entries
    ours = {MANIFEST, REPORT} | {str(s["name"]) for s in body["shards"]}
    return [name for name in entries if name not in ours]
