"""The pipeline's first step: a fixed copy of the raw files a run reads.

``python -m workloads.data.ingest SOURCE --out OUT`` copies every file the Spark job
would read (`workloads.data.prepare.list_sources`: the ``.txt`` and ``.jsonl`` files
under SOURCE, hidden ones left out) to OUT, keeping their relative paths, and writes
``OUT/ingest.json``: each file's path, kind, size and SHA-256, and a digest over that
listing. The later steps read the copy, so a SOURCE that changes while a pipeline runs
cannot change what the run trains on; on a cluster the copy is the run's artifact in
the in-region bucket (docs/pipelines.md).

Each copy is hashed again after copying and compared with the listing: a file that
changed during the copy stops the step. OUT must be absent or empty; it is written as a
hidden sibling and renamed into place at the end, so it never holds half a copy.

Exit status: 0 copied; 2 a SOURCE with nothing to read, an OUT that is not absent or
empty or cannot be written, a file that cannot be read or changed while it was copied.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.data.manifest import file_sha256, write_json_atomic
from workloads.data.prepare import Source, UserError, list_sources

LISTING = "ingest.json"
FORMAT = "uae-platform-ingest/1"
EXIT_OK = 0
EXIT_USER_ERROR = 2


def listing_digest(files: Sequence[dict[str, Any]]) -> str:
    """128 bits of SHA-256 over the canonical JSON of the file list (as the dataset
    manifest's digest is made)."""
    canonical = json.dumps(list(files), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _check_out(out: Path, source: Path) -> None:
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise UserError(f"OUT {out} exists and is not an empty directory; nothing was changed")
    root = source.resolve() if source.is_dir() else source.resolve().parent
    resolved = out.resolve()
    if resolved == root or root in resolved.parents:
        raise UserError(f"OUT {out} is inside SOURCE {source}; choose an OUT outside it")


def _copy(source: Source, staging: Path) -> dict[str, Any]:
    target = staging / source.relative
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(source.path, target)
        copied = file_sha256(target)
    except OSError as err:
        raise UserError(f"cannot copy {source.relative} ({err.strerror or err})") from err
    if copied != source.sha256:
        raise UserError(
            f"{source.relative} changed while it was copied (listed sha256 "
            f"{source.sha256[:12]}, copied {copied[:12]}); run the step again once SOURCE "
            "is still"
        )
    return {"path": source.relative, "kind": source.kind, "bytes": source.bytes, "sha256": copied}


def ingest(source: Path, out: Path) -> dict[str, Any]:
    """Copy SOURCE's readable files to ``out`` with their listing; returns the listing.

    Raises:
        UserError: nothing to read, an OUT that is not absent or empty, a failed copy.
    """
    sources = list_sources(source)
    _check_out(out, source)
    staging = out.with_name(f".{out.name}.tmp-{secrets.token_hex(4)}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as err:  # a file where a folder should be, a read-only folder
        raise UserError(
            f"OUT {out} cannot be written ({err.strerror}); choose an OUT in a folder you can write"
        ) from err
    try:
        files = [_copy(s, staging) for s in sources]
        listing = {
            "format": FORMAT,
            "source": str(source),
            "files": files,
            "bytes": sum(f["bytes"] for f in files),
            "digest": listing_digest(files),
        }
        write_json_atomic(staging / LISTING, listing)
        _check_out(out, source)  # OUT may have changed during the copy
        if out.exists():
            out.rmdir()  # empty (checked): replaced by the finished copy
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return listing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.data.ingest",
        description="Copy the .txt/.jsonl files of SOURCE to OUT with a listing (sizes, SHA-256).",
    )
    parser.add_argument("source", type=Path, help="directory (or file) of .txt/.jsonl files")
    parser.add_argument("--out", type=Path, required=True, help="absent or empty directory")
    args = parser.parse_args(argv)
    try:
        listing = ingest(args.source, args.out)
    except UserError as err:
        print(f"ingest: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(
        f"ingest: {len(listing['files'])} file(s), {listing['bytes']} bytes from {args.source} "
        f"-> {args.out} (listing digest {listing['digest']})"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
