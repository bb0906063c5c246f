"""``python -m workloads.features bench`` (``make bench-features``): the figures of
BENCHMARKS.md's feature-store section, on a working directory ``make features`` made.

1. **Online feature lookup** (the local store: SQLite): ``get_online_features`` of the
   model's eleven features (eight stored, three on-demand) for one customer, p50/p99
   over ``--requests`` calls on random customers, in this process.
2. **Predictor latency with the lookup**: a V2 request by entity key to the model
   server (started here on 127.0.0.1, stopped at the end), one client, p50/p99 and
   requests/s; the same with raw feature values (no lookup) beside it.
3. **Tabular inference throughput**: rows/s of ONNX Runtime and of native LightGBM on
   the same ``--rows`` float32 rows, the same thread count, alternated in one run (five
   rounds, the median of each), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shlex
import statistics
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.features import model, repo
from workloads.features.data import ACTIVITY_FILE
from workloads.features.server import free_port, running_server


def percentile(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def lookup_latency(workdir: Path, customers: list[int], requests: int) -> dict[str, float]:
    from feast import FeatureStore  # noqa: PLC0415

    store = FeatureStore(repo_path=str(workdir / "repo"))
    refs = repo.feature_refs()
    rng = random.Random(1)
    for _ in range(50):  # warm-up: registry cache, SQLite pages
        store.get_online_features(features=refs, entity_rows=[{repo.JOIN_KEY: customers[0]}])
    samples = []
    for _ in range(requests):
        key = rng.choice(customers)
        started = time.perf_counter()
        store.get_online_features(features=refs, entity_rows=[{repo.JOIN_KEY: key}]).to_dict()
        samples.append(time.perf_counter() - started)
    return {"p50_ms": percentile(samples, 50) * 1e3, "p99_ms": percentile(samples, 99) * 1e3}


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url, data=body, headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        json.loads(response.read())


def predictor_latency(url: str, bodies: list[bytes], requests: int) -> dict[str, float]:
    for body in bodies[:50]:
        _post(url, body)
    samples = []
    started_all = time.perf_counter()
    for index in range(requests):
        started = time.perf_counter()
        _post(url, bodies[index % len(bodies)])
        samples.append(time.perf_counter() - started)
    elapsed = time.perf_counter() - started_all
    return {
        "p50_ms": percentile(samples, 50) * 1e3,
        "p99_ms": percentile(samples, 99) * 1e3,
        "rps": requests / elapsed,
    }


def real_rows(data_dir: Path, rows: int) -> model.Matrix:
    """``rows`` model inputs from the generated data: every activity snapshot with the
    profile of its time and the derived ratios (repeated to ``rows``)."""
    from workloads.features.data import PROFILE_FILE  # noqa: PLC0415

    activity = pd.read_parquet(data_dir / ACTIVITY_FILE).sort_values("event_timestamp")
    profiles = pd.read_parquet(data_dir / PROFILE_FILE).sort_values("event_timestamp")
    frame = pd.merge_asof(activity, profiles, on="event_timestamp", by="customer_id")
    frame = frame.dropna(subset=list(repo.BASE_FEATURES))
    derived = repo.derive({name: frame[name].tolist() for name in repo.BASE_FEATURES})
    frame = frame.assign(**derived)
    x = model.as_matrix(frame)
    return np.resize(x, (rows, x.shape[1]))


def throughput(model_dir: Path, rows: int, threads: int) -> dict[str, float]:
    import lightgbm as lgb  # noqa: PLC0415

    booster = lgb.Booster(model_file=str(model_dir / model.NATIVE_FILE))
    session = model.onnx_session((model_dir / model.ONNX_FILE).read_bytes(), threads=threads)
    x = real_rows(model_dir.parent / "data", rows)
    ort_rates, native_rates = [], []
    for _ in range(5):  # alternated: both see the same machine load
        started = time.perf_counter()
        model.onnx_probability(session, x)
        ort_rates.append(rows / (time.perf_counter() - started))
        started = time.perf_counter()
        booster.predict(x, num_threads=threads)
        native_rates.append(rows / (time.perf_counter() - started))
    ort_rate, native_rate = statistics.median(ort_rates), statistics.median(native_rates)
    return {"onnx_rows_s": ort_rate, "native_rows_s": native_rate, "ratio": ort_rate / native_rate}


def versions() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    packages = ("feast", "lightgbm", "onnxruntime", "kserve", "numpy")
    return f"Python {platform.python_version()}, " + ", ".join(
        f"{name} {version(name)}" for name in packages
    )


def main(args: argparse.Namespace) -> int:
    workdir: Path = args.workdir
    served = sorted((workdir / "served").glob("*"), key=lambda p: int(p.name))
    if not served:
        print("bench: no registered version was served here; run `make features`", file=sys.stderr)
        return 2
    activity = pd.read_parquet(workdir / "data" / ACTIVITY_FILE)
    customers = sorted(int(c) for c in activity["customer_id"].unique())
    print("bench: online lookup ...", flush=True)
    lookup = lookup_latency(workdir, customers, args.requests)
    rng = random.Random(2)
    key_bodies = [
        json.dumps(
            {
                "inputs": [
                    {
                        "name": repo.JOIN_KEY,
                        "datatype": "INT64",
                        "shape": [1],
                        "data": [rng.choice(customers)],
                    }
                ]
            }
        ).encode()
        for _ in range(200)
    ]
    latest = activity.sort_values("event_timestamp").groupby("customer_id").last()
    raw_bodies = []
    for customer in customers[:200]:
        row = latest.loc[customer]
        values = {"plan_price_aed": 299.0, "seats": 5.0, "contract_monthly": 1.0}
        values |= {name: float(row[name]) for name in repo.ACTIVITY_FEATURES}
        raw_bodies.append(
            json.dumps(
                {
                    "inputs": [
                        {"name": n, "datatype": "FP64", "shape": [1], "data": [v]}
                        for n, v in values.items()
                    ]
                }
            ).encode()
        )
    port = free_port()
    print("bench: predictor ...", flush=True)
    with running_server(
        served[-1], workdir / "repo", port, "smb-churn", workdir / "bench-server.log"
    ) as url:
        infer = f"{url}/v2/models/smb-churn/infer"
        by_key = predictor_latency(infer, key_bodies, args.requests)
        by_value = predictor_latency(infer, raw_bodies, args.requests)
    print("bench: throughput ...", flush=True)
    rates = throughput(workdir / "model", args.rows, args.threads)
    command = "python -m workloads.features " + shlex.join(sys.argv[1:])
    lines = [
        f"Command: `{command}` on {datetime.now(UTC):%Y-%m-%d}, {platform.machine()} "
        f"{platform.node()}; {versions()}.",
        "",
        "| figure | p50 | p99 | rate |",
        "| --- | --- | --- | --- |",
        f"| online lookup, 11 features of 1 customer (SQLite) | {lookup['p50_ms']:.2f} ms "
        f"| {lookup['p99_ms']:.2f} ms | |",
        f"| predictor, V2 by entity key (lookup included), 1 client | {by_key['p50_ms']:.2f} ms "
        f"| {by_key['p99_ms']:.2f} ms | {by_key['rps']:.0f} req/s |",
        f"| predictor, V2 by raw values (no lookup), 1 client | {by_value['p50_ms']:.2f} ms "
        f"| {by_value['p99_ms']:.2f} ms | {by_value['rps']:.0f} req/s |",
        f"| ONNX Runtime, {args.rows} rows, {args.threads} thread(s) | | | "
        f"{rates['onnx_rows_s']:,.0f} rows/s |",
        f"| LightGBM native, same rows and threads | | | {rates['native_rows_s']:,.0f} rows/s |",
        f"| **ratio ONNX Runtime / LightGBM** | | | **{rates['ratio']:.2f}x** |",
    ]
    text = "\n".join(lines)
    print(text)
    if args.record is not None:
        with args.record.open("a") as handle:
            handle.write("\n" + text + "\n")
    return 0
