"""``make serve-llm MODEL=models:/<name>@<alias>``: the registry's model version as a
local folder vLLM serves.

Runs in the lifecycle environment (MLflow's client; the llm environment has none). It
resolves the alias (or takes ``models:/<name>/<version>``) on the in-region tracking
server, downloads that version's transformers-flavor artifacts and lays out the folder
vLLM reads: the model's files (``config.json``, safetensors weights) with the tokenizer's
beside them, in ``<out>/<name>/<version>``. It prints that folder's path on stdout, and
nothing else.

A version that is not a transformers-flavor model (the ONNX one ``make register``
writes), or one that holds no weights of its own (MLflow's ``save_pretrained=False``
records only a hub repository's name), is refused: weights come only from in-region
storage. A folder already there is reused when this command made it for the same
version (its `MARKER` says so), and is never overwritten otherwise.

Usage::

    python -m workloads.llm.registry models:/tiny@champion --tracking-uri URI [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.tracking.registry import RegistryError, call, make_client

DEFAULT_OUT = Path("build/llm-models")
#: Written last into a folder this command laid out: which version it holds.
MARKER = ".registry-version.json"
URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>\d+))$")
#: MLflow's transformers flavor: where it keeps the model and its components.
FLAVOR = "transformers"
MODEL_BINARY = "model_binary"
COMPONENTS_DIR = "components"


def parse(uri: str) -> tuple[str, str | None, str | None]:
    """``(name, alias, version)`` of a ``models:/`` URI; exactly one of the last two."""
    match = URI.match(uri)
    if match is None:
        raise RegistryError(
            f"MODEL={uri}: give models:/<name>@<alias> (e.g. models:/tiny@champion) or "
            "models:/<name>/<version>"
        )
    return match["name"], match["alias"], match["version"]


def _flavor(folder: Path, uri: str) -> dict[str, Any]:
    from mlflow.models import Model  # noqa: PLC0415 - slow import

    if not (folder / "MLmodel").is_file():
        raise RegistryError(f"{uri} has no MLmodel file: not an MLflow model")
    flavors: dict[str, Any] = Model.load(str(folder)).flavors
    if FLAVOR not in flavors:
        raise RegistryError(
            f"{uri} is a {'/'.join(sorted(flavors)) or 'flavorless'} model, not a transformers "
            "one: register the make export-hf folder with mlflow.transformers"
        )
    flavor: dict[str, Any] = flavors[FLAVOR]
    if not flavor.get(MODEL_BINARY):
        source = flavor.get("source_model_name", "a hub repository")
        raise RegistryError(
            f"{uri} holds no weights (it names {source}, saved without save_pretrained): "
            "weights come only from in-region storage; register the weights themselves"
        )
    return flavor


def lay_out(download: Path, target: Path, uri: str) -> None:
    """The folder vLLM reads, from a transformers-flavor model's artifacts: the model's
    files, with the tokenizer's (``components/tokenizer``) beside them."""
    flavor = _flavor(download, uri)
    model = download / str(flavor[MODEL_BINARY])
    if not (model / "config.json").is_file():
        raise RegistryError(f"{uri}: its {flavor[MODEL_BINARY]}/ folder has no config.json")
    shutil.copytree(model, target)
    for component in flavor.get(COMPONENTS_DIR, []):
        source = download / COMPONENTS_DIR / str(component)
        if source.is_dir():
            for item in source.iterdir():
                if item.is_file() and not (target / item.name).exists():
                    shutil.copy2(item, target / item.name)


def fetch(uri: str, tracking_uri: str, out: Path) -> Path:
    """The local folder of the model version ``uri`` names, downloaded if needed."""
    name, alias, number = parse(uri)
    client = make_client(tracking_uri)
    if alias is not None:
        version = call(
            tracking_uri,
            lambda: client.get_model_version_by_alias(name, alias),
            missing=f"MODEL={uri}: the registry at {tracking_uri} has no model {name!r} "
            f"with alias {alias!r} (make register names the transformers model <name>-hf)",
        )
    else:
        version = call(
            tracking_uri,
            lambda: client.get_model_version(name, number),
            missing=f"MODEL={uri}: the registry at {tracking_uri} has no version {number} "
            f"of {name!r}",
        )
    target = out / name / str(version.version)
    marker = target / MARKER
    if target.exists():
        try:
            held = json.loads(marker.read_text())
        except (OSError, ValueError):
            held = None
        if held == {"name": name, "version": str(version.version)}:
            return target  # laid out before, for this very version
        raise RegistryError(
            f"{target} exists and was not made by serve-llm for {name} version "
            f"{version.version}: move it away or give another --out"
        )
    from mlflow.artifacts import download_artifacts  # noqa: PLC0415 - slow import

    target.parent.mkdir(parents=True, exist_ok=True)
    # Downloaded and laid out beside the target, then renamed: an interrupted download
    # leaves no half folder that a later run would serve.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        # The version's own artifact location (the registry's models:/ URI would be
        # resolved against MLflow's default registry, not this one).
        source = call(
            tracking_uri,
            lambda: client.get_model_version_download_uri(name, str(version.version)),
        )
        artifacts = Path(
            call(
                tracking_uri,
                lambda: download_artifacts(
                    artifact_uri=source,
                    dst_path=str(Path(tmp) / "artifacts"),
                    tracking_uri=tracking_uri,
                ),
            )
        )
        staged = Path(tmp) / "model"
        lay_out(artifacts, staged, uri)
        (staged / MARKER).write_text(json.dumps({"name": name, "version": str(version.version)}))
        staged.rename(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.llm.registry",
        description="Download a registered transformers-flavor model version for vLLM.",
    )
    parser.add_argument("uri", help="models:/<name>@<alias> or models:/<name>/<version>")
    parser.add_argument("--tracking-uri", required=True, help="the in-region tracking server")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="(build/llm-models)")
    args = parser.parse_args(argv)
    try:
        folder = fetch(args.uri, args.tracking_uri, args.out)
    except RegistryError as err:
        print(f"serve-llm: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"serve-llm: cannot write {args.out} ({err.strerror})", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
