"""The example feature repository: SMB customer churn, in Feast.

Objects (built by `definitions` for a data directory, applied with `apply`):

- entity ``customer`` (join key ``customer_id``, INT64);
- feature view ``customer_profile`` over ``profiles.parquet`` (plan price, seats,
  contract type; a profile is valid until it changes, so its TTL is long);
- feature view ``customer_activity`` over ``activity.parquet`` (weekly snapshots; a
  snapshot older than two weeks is stale and retrieved as missing);
- on-demand feature view ``customer_ratios``: ratios of the two views' features,
  computed at retrieval time by `derive`, the same function the predictor applies to
  raw feature values, so training and serving cannot compute them differently;
- feature service ``churn_model_v1``: the model's inputs, in `MODEL_FEATURES` order.

Locally the store is Feast's default: a file registry, the SQLite online store and the
file (Parquet) offline store, all under one working directory (`local_config`). On the
cluster the same definitions are applied with a SQL registry, Parquet in the stack's
bucket and Redis (`modules/k8s/features/`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from workloads.features.data import ACTIVITY_FILE, PROFILE_FILE

PROJECT = "smb_churn"
ENTITY = "customer"
JOIN_KEY = "customer_id"
PROFILE_VIEW = "customer_profile"
ACTIVITY_VIEW = "customer_activity"
RATIOS_VIEW = "customer_ratios"
FEATURE_SERVICE = "churn_model_v1"
LABEL = "churned_30d"

#: Profile features (customer_profile), as stored.
PROFILE_FEATURES = ("plan_price_aed", "seats", "contract_monthly")
#: Activity features (customer_activity), as stored.
ACTIVITY_FEATURES = (
    "logins_7d",
    "transactions_30d",
    "transaction_value_30d_aed",
    "support_tickets_30d",
    "days_since_last_login",
)
#: The features a raw-value request carries: every stored feature.
BASE_FEATURES = PROFILE_FEATURES + ACTIVITY_FEATURES
#: On-demand features (customer_ratios), computed by `derive` from the base features.
DERIVED_FEATURES = ("value_per_seat_aed", "tickets_per_login", "price_to_value_ratio")
#: The model's input columns, in this order (the ONNX input's second axis).
MODEL_FEATURES = BASE_FEATURES + DERIVED_FEATURES

#: A profile holds until it changes; two years covers every generated customer.
PROFILE_TTL = timedelta(days=730)
#: Activity is a weekly snapshot: older than two weeks means the snapshot job stopped.
ACTIVITY_TTL = timedelta(days=14)


def derive(columns: Mapping[str, Sequence[Any]]) -> dict[str, list[float | None]]:
    """The on-demand features of a batch of base feature values.

    ``columns`` maps base feature names to equally long sequences; a missing input
    (``None`` or NaN) gives a missing output. Feast calls this with its python-mode
    dictionaries (training and online retrieval), the predictor with raw request values.
    """
    out: dict[str, list[float | None]] = {name: [] for name in DERIVED_FEATURES}
    rows = zip(
        columns["transaction_value_30d_aed"],
        columns["seats"],
        columns["support_tickets_30d"],
        columns["logins_7d"],
        columns["plan_price_aed"],
        strict=True,
    )
    for value, seats, tickets, logins, price in rows:
        if any(_missing(x) for x in (value, seats, tickets, logins, price)):
            for name in DERIVED_FEATURES:
                out[name].append(None)
            continue
        out["value_per_seat_aed"].append(float(value) / max(float(seats), 1.0))
        out["tickets_per_login"].append(float(tickets) / (float(logins) + 1.0))
        out["price_to_value_ratio"].append(float(price) / (float(value) + 1.0))
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def feature_refs() -> list[str]:
    """``view:feature`` references of `MODEL_FEATURES` (for Feast's retrieval calls)."""
    views = {
        **dict.fromkeys(PROFILE_FEATURES, PROFILE_VIEW),
        **dict.fromkeys(ACTIVITY_FEATURES, ACTIVITY_VIEW),
        **dict.fromkeys(DERIVED_FEATURES, RATIOS_VIEW),
    }
    return [f"{views[name]}:{name}" for name in MODEL_FEATURES]


def definitions(data_dir: Path | str, s3_endpoint: str = "") -> list[Any]:
    """The Feast objects over the Parquet files in ``data_dir`` (a local directory or,
    on the cluster, an ``s3://`` prefix of the stack's bucket, read through
    ``s3_endpoint``, the region's S3 endpoint: `workloads.features.offline`).

    Amounts are Float64 in both stores: a Float32 online value would differ from the
    offline one in the last digits, and the ratios computed from them with it.
    """
    from feast import Entity, FeatureService, FeatureView, Field, FileSource  # noqa: PLC0415
    from feast.on_demand_feature_view import on_demand_feature_view  # noqa: PLC0415
    from feast.types import Float64, Int64  # noqa: PLC0415
    from feast.value_type import ValueType  # noqa: PLC0415

    base = str(data_dir).rstrip("/")
    # Feast's readers (PyArrow's S3 file system, Dask through s3fs) take the endpoint
    # from each source; a local path has none.
    endpoint = s3_endpoint if base.startswith("s3://") and s3_endpoint else None
    customer = Entity(
        name=ENTITY,
        join_keys=[JOIN_KEY],
        value_type=ValueType.INT64,
        description="An SMB customer account",
    )
    profile = FeatureView(
        name=PROFILE_VIEW,
        entities=[customer],
        ttl=PROFILE_TTL,
        schema=[
            Field(name="plan_price_aed", dtype=Float64, description="Plan price, AED/month"),
            Field(name="seats", dtype=Int64, description="Licensed seats"),
            Field(name="contract_monthly", dtype=Int64, description="1: monthly, 0: annual"),
        ],
        online=True,
        source=FileSource(
            name="customer_profiles",
            path=f"{base}/{PROFILE_FILE}",
            timestamp_field="event_timestamp",
            s3_endpoint_override=endpoint,
        ),
        tags={"team": "smb-analytics"},
    )
    activity = FeatureView(
        name=ACTIVITY_VIEW,
        entities=[customer],
        ttl=ACTIVITY_TTL,
        schema=[
            Field(name="logins_7d", dtype=Int64),
            Field(name="transactions_30d", dtype=Int64),
            Field(name="transaction_value_30d_aed", dtype=Float64),
            Field(name="support_tickets_30d", dtype=Int64),
            Field(name="days_since_last_login", dtype=Int64),
        ],
        online=True,
        source=FileSource(
            name="customer_activity_snapshots",
            path=f"{base}/{ACTIVITY_FILE}",
            timestamp_field="event_timestamp",
            s3_endpoint_override=endpoint,
        ),
        tags={"team": "smb-analytics"},
    )

    @on_demand_feature_view(  # type: ignore[untyped-decorator]  # feast's decorator is untyped
        name=RATIOS_VIEW,
        sources=[profile, activity],
        schema=[Field(name=name, dtype=Float64) for name in DERIVED_FEATURES],
        mode="python",
    )
    def customer_ratios(inputs: dict[str, Any]) -> dict[str, Any]:
        return derive(inputs)

    service = FeatureService(
        name=FEATURE_SERVICE,
        features=[profile, activity, customer_ratios],
        description="Inputs of the SMB churn model",
    )
    return [customer, profile, activity, customer_ratios, service]


def local_config(workdir: Path) -> Any:
    """Feast's local defaults under ``workdir``: file registry, SQLite online store,
    file offline store (also the training job's own store on the cluster, which reads
    only the offline store: `workloads.features.cluster`)."""
    from feast.repo_config import RepoConfig  # noqa: PLC0415

    repo = workdir / "repo"
    return RepoConfig(
        project=PROJECT,
        provider="local",
        registry=str(repo / "registry.db"),
        online_store={"type": "sqlite", "path": str(repo / "online_store.db")},
        offline_store={"type": "file"},
        entity_key_serialization_version=3,
        repo_path=str(repo),
    )


#: The repository's definitions file, beside ``feature_store.yaml`` (`definitions_file`).
DEFINITIONS_FILE = f"{PROJECT}.py"
_DEFINITIONS = '''\
"""The Feast objects that `make features` applied (written by python -m
workloads.features run): `workloads.features.repo.definitions` over the working
directory's data. Feast's CLI reads them from here: feast -c <this folder> plan."""

import sys

from feast import Project

sys.path.insert(0, {root!r})  # the checkout that wrote this file

from workloads.features.repo import PROJECT, definitions  # noqa: E402

project = Project(name=PROJECT)
{names} = definitions({data!r})
'''


def definitions_file(data_dir: Path) -> str:
    """The repository's Python file of Feast objects: `definitions` over ``data_dir``.

    Feast's own commands (``feast plan``, ``feast apply``) take a repository's objects
    from its Python files; with this one beside ``feature_store.yaml`` they see exactly
    what `make features` applied, so ``feast plan`` there changes nothing. Without it
    they would delete every object of the registry.
    """
    names = (ENTITY, PROFILE_VIEW, ACTIVITY_VIEW, RATIOS_VIEW, FEATURE_SERVICE)
    root = str(Path(__file__).resolve().parents[2])
    return _DEFINITIONS.format(root=root, names=", ".join(names), data=str(data_dir))


def apply_as_feast_cli(store: Any, objects: Sequence[Any]) -> None:
    """Apply `definitions`' ``objects`` to ``store`` as ``feast apply`` applies the
    repository's definitions file (`feast.repo_operations`): the objects as its parser
    collects them (with their sources, the file's project and Feast's placeholder
    entity), planned and applied, so that the registry also records the online store's
    tables. A ``feast plan`` of the definitions file then compares like with like."""
    from feast import Entity, FeatureService, FeatureView, Project  # noqa: PLC0415
    from feast.feature_view import DUMMY_ENTITY  # noqa: PLC0415
    from feast.on_demand_feature_view import OnDemandFeatureView  # noqa: PLC0415
    from feast.repo_contents import RepoContents  # noqa: PLC0415
    from feast.repo_operations import apply_total_with_repo_instance  # noqa: PLC0415

    views = [o for o in objects if isinstance(o, FeatureView)]
    contents = RepoContents(
        projects=[Project(name=PROJECT)],
        data_sources=[view.batch_source for view in views if view.batch_source is not None],
        feature_views=views,
        on_demand_feature_views=[o for o in objects if isinstance(o, OnDemandFeatureView)],
        stream_feature_views=[],
        label_views=[],
        entities=[*(o for o in objects if isinstance(o, Entity)), DUMMY_ENTITY],
        feature_services=[o for o in objects if isinstance(o, FeatureService)],
        permissions=[],
    )
    apply_total_with_repo_instance(
        store, PROJECT, store.registry, contents, skip_source_validation=False
    )


def feature_store_yaml(workdir: Path) -> str:
    """The ``feature_store.yaml`` of `local_config` (written beside the registry, so
    ``feast -c <workdir>/repo ...`` works on the same store)."""
    repo = workdir.resolve() / "repo"
    return (
        f"project: {PROJECT}\n"
        f"registry: {repo / 'registry.db'}\n"
        "provider: local\n"
        "online_store:\n"
        "  type: sqlite\n"
        f"  path: {repo / 'online_store.db'}\n"
        "offline_store:\n"
        "  type: file\n"
        "entity_key_serialization_version: 3\n"
    )
