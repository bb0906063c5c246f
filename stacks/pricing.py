"""AWS on-demand prices of the instance types the stacks use, as a cited snapshot.

The snapshot (``stacks/prices/<region>.json``) is what ``make cost``, the fleet's burst
quotas and OpenCost's custom pricing read, offline. It names where its figures come
from (repository, path, commit, or the Pricing API) and their date; a figure is shown
only when the snapshot is ``verified`` and the type's ``usdPerHour`` is set
(`PriceSnapshot.price`): otherwise it is withheld and only node-hours and GPU-hours are
reported. ``python -m stacks.pricing refresh`` rewrites the snapshot from AWS's price
list through the Pricing API (boto3, default credentials).

Residency note: the Pricing API has endpoints only outside the UAE (us-east-1,
eu-central-1, ap-south-1). The refresh *reads public list prices* there; it sends
nothing of the platform (no names, no usage, no account data beyond the signed
request), so no platform data leaves the UAE. OpenCost in the clusters never calls it:
it is given the snapshot's prices as custom pricing.

Usage: ``python -m stacks.pricing refresh [--region me-central-1] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PRICES_DIR = Path(__file__).resolve().parent / "prices"
DEFAULT_REGION = "me-central-1"
#: The Pricing API's endpoint region the refresh calls (public prices only).
PRICING_ENDPOINT_REGION = "us-east-1"
HOURS_PER_MONTH = 730  # AWS's own convention for monthly estimates (8760 / 12)


class PricingError(Exception):
    """A snapshot or price-list answer that cannot be used (one-screen message)."""


@dataclass(frozen=True)
class InstancePrice:
    """One instance type's shape and on-demand Linux price in a region.

    Args:
        instance_type: e.g. ``p5en.48xlarge``.
        usd_per_hour: on-demand, Linux, shared tenancy, no pre-installed software; None
            when the snapshot has no price from its source for the type (the shape is
            still known: quotas and node-hours need it).
        vcpus: vCPUs per instance.
        memory_gib: memory per instance in GiB.
        gpus: GPUs per instance (0 for none).
        source_row: the source's record the price was copied from, verbatim (None for
            the Pricing API, whose answer is not kept).
    """

    instance_type: str
    usd_per_hour: float | None
    vcpus: int
    memory_gib: int
    gpus: int
    source_row: str | None = None


@dataclass(frozen=True)
class PriceSnapshot:
    """A set of prices for one region, with where and when they were obtained.

    Args:
        region: the AWS region the prices are for.
        retrieved: when the snapshot was written (ISO date).
        source: what the figures are, in words.
        verified: true only when the figures come from a source the file cites;
            an unverified snapshot's figures are never shown (`price`).
        instance_types: each type's shape and price.
        source_repository: the public repository the figures were copied from.
        source_path: the file in it.
        source_commit: the commit of that file.
        data_date: the date the source gives its figures (ISO), None when it gives none.
        data_date_note: why there is no date, or what the date is.
    """

    region: str
    retrieved: str
    source: str
    verified: bool
    instance_types: dict[str, InstancePrice]
    source_repository: str | None = None
    source_path: str | None = None
    source_commit: str | None = None
    data_date: str | None = None
    data_date_note: str | None = None

    def price(self, instance_type: str) -> float | None:
        """The type's real hourly price, or None: unknown type, no price for it in the
        source, or an unverified snapshot. The only way figures leave the snapshot."""
        entry = self.instance_types.get(instance_type)
        if not self.verified or entry is None:
            return None
        return entry.usd_per_hour

    def citation(self) -> str:
        """Where the figures come from and of when, in one line (for `make cost`)."""
        if self.source_repository:
            where = f"{self.source_repository} {self.source_path} at commit {self.source_commit}"
        else:
            where = self.source
        date = self.data_date or "not stated by the source"
        return f"{where}; data date: {date}; copied {self.retrieved}"


def snapshot_path(region: str = DEFAULT_REGION) -> Path:
    return PRICES_DIR / f"{region}.json"


def load_snapshot(path: Path | None = None) -> PriceSnapshot:
    """Read a snapshot file; `PricingError` naming the file when it is unusable."""
    path = path or snapshot_path()
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        types = {
            name: InstancePrice(
                instance_type=name,
                usd_per_hour=_optional_float(entry["usdPerHour"]),
                vcpus=int(entry["vcpus"]),
                memory_gib=int(entry["memoryGib"]),
                gpus=int(entry["gpus"]),
                source_row=_optional_str(entry.get("sourceRow")),
            )
            for name, entry in document["instanceTypes"].items()
        }
        verified = document["verified"]
        if not isinstance(verified, bool):
            raise TypeError(f"verified must be true or false, got {verified!r}")
        return PriceSnapshot(
            region=str(document["region"]),
            retrieved=str(document["retrieved"]),
            source=str(document["source"]),
            verified=verified,
            instance_types=types,
            source_repository=_optional_str(document.get("sourceRepository")),
            source_path=_optional_str(document.get("sourcePath")),
            source_commit=_optional_str(document.get("sourceCommit")),
            data_date=_optional_str(document.get("dataDate")),
            data_date_note=_optional_str(document.get("dataDateNote")),
        )
    except FileNotFoundError:
        raise PricingError(
            f"no price snapshot at {path}: run `python -m stacks.pricing refresh`"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise PricingError(f"{path} is not a valid price snapshot ({err!r})") from None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


# -- the Pricing API's answer ----------------------------------------------------------


def _number(text: str, what: str, instance_type: str) -> float:
    match = re.match(r"^\s*([\d,]+(?:\.\d+)?)", text or "")
    if match is None:
        raise PricingError(f"{instance_type}: cannot read {what} from {text!r}")
    return float(match.group(1).replace(",", ""))


def parse_price_list(items: Iterable[str]) -> dict[str, InstancePrice]:
    """Instance prices from ``pricing.get_products``'s ``PriceList`` (JSON strings).

    Keeps on-demand Linux, shared-tenancy, no-pre-installed-software, ``Used``
    capacity products (the filters `refresh` asks for; checked again here), and the
    USD price per ``Hrs`` of their one on-demand price dimension.
    """
    prices: dict[str, InstancePrice] = {}
    for text in items:
        product = json.loads(text)
        attributes = product.get("product", {}).get("attributes", {})
        name = attributes.get("instanceType")
        if not name:
            continue
        wanted = {
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        if any(attributes.get(k) != v for k, v in wanted.items()):
            continue
        dimensions = [
            dim
            for term in product.get("terms", {}).get("OnDemand", {}).values()
            for dim in term.get("priceDimensions", {}).values()
            if dim.get("unit") == "Hrs"
        ]
        if len(dimensions) != 1:
            raise PricingError(
                f"{name}: expected one hourly on-demand price, got {len(dimensions)}"
            )
        usd = dimensions[0].get("pricePerUnit", {}).get("USD")
        if usd is None:
            raise PricingError(f"{name}: the on-demand price has no USD amount")
        prices[name] = InstancePrice(
            instance_type=name,
            usd_per_hour=float(usd),
            vcpus=int(_number(attributes.get("vcpu", ""), "vcpu", name)),
            memory_gib=int(_number(attributes.get("memory", ""), "memory", name)),
            gpus=int(_number(attributes.get("gpu", "0"), "gpu", name)),
        )
    return prices


def publication_date(items: Iterable[str]) -> str | None:
    """The newest ``publicationDate`` (ISO date) among price-list products: the date
    AWS gives its figures, which the snapshot records as its ``dataDate``."""
    dates = sorted(str(json.loads(text).get("publicationDate", ""))[:10] for text in items)
    dates = [d for d in dates if d]
    return dates[-1] if dates else None


def fetch_prices(
    client: Any, region: str, instance_types: Sequence[str]
) -> tuple[dict[str, InstancePrice], str | None]:
    """Ask the Pricing API for each type's on-demand Linux price in ``region``; also
    the newest publication date of the answers."""
    prices: dict[str, InstancePrice] = {}
    dates: list[str] = []
    for name in instance_types:
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (
                ("regionCode", region),
                ("instanceType", name),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
            )
        ]
        items: list[str] = []
        for page in client.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
        ):
            items += page["PriceList"]
        found = parse_price_list(items)
        if name not in found:
            raise PricingError(
                f"the price list has no on-demand Linux price for {name} in {region}"
            )
        prices[name] = found[name]
        date = publication_date(items)
        if date:
            dates.append(date)
    return prices, (max(dates) if dates else None)


def snapshot_document(
    region: str,
    prices: dict[str, InstancePrice],
    retrieved: dt.date,
    data_date: str | None = None,
) -> dict[str, Any]:
    """The snapshot file the refresh writes (verified: the figures are the API's)."""
    return {
        "region": region,
        "retrieved": retrieved.isoformat(),
        "source": (
            "AWS Price List Query API (pricing.get_products, ServiceCode AmazonEC2), "
            "on-demand, Linux, shared tenancy, refreshed with `python -m stacks.pricing refresh`"
        ),
        "sourceRepository": None,
        "sourcePath": None,
        "sourceCommit": None,
        "dataDate": data_date,
        "dataDateNote": "the newest publicationDate of the Pricing API's answers",
        "terms": "on-demand, Linux, shared tenancy, no pre-installed software",
        "verified": True,
        "currency": "USD",
        "instanceTypes": {
            name: {
                "usdPerHour": p.usd_per_hour,
                "vcpus": p.vcpus,
                "memoryGib": p.memory_gib,
                "gpus": p.gpus,
            }
            for name, p in sorted(prices.items())
        },
    }


def stack_instance_types(stacks_dir: Path | None = None) -> list[str]:
    """Every instance type the shipped stack files use (the snapshot's content)."""
    stacks_dir = stacks_dir or Path(__file__).resolve().parent
    types: set[str] = set()
    for path in stacks_dir.glob("Pulumi.*.yaml"):
        config = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config") or {}
        for pool in config.get("uae-gpu-platform:nodePools") or []:
            if isinstance(pool, dict) and pool.get("instanceType"):
                types.add(str(pool["instanceType"]))
    return sorted(types)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.pricing", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    refresh = sub.add_parser("refresh", help="rewrite the snapshot from the Pricing API")
    refresh.add_argument("--region", default=DEFAULT_REGION)
    refresh.add_argument("--out", type=Path, default=None)
    options = parser.parse_args(argv)
    import boto3  # noqa: PLC0415 - only the refresh needs AWS
    import botocore.exceptions  # noqa: PLC0415

    out = options.out or snapshot_path(options.region)
    try:
        client = boto3.client("pricing", region_name=PRICING_ENDPOINT_REGION)
        prices, data_date = fetch_prices(client, options.region, stack_instance_types())
    except botocore.exceptions.NoCredentialsError:
        print(
            "error: no AWS credentials: the Pricing API needs any signed-in identity",
            file=sys.stderr,
        )
        return 2
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
        print(f"error: the Pricing API refused the request: {err}", file=sys.stderr)
        return 2
    except PricingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    document = snapshot_document(options.region, prices, dt.datetime.now(dt.UTC).date(), data_date)
    out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(prices)} instance types, retrieved {document['retrieved']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
