"""`python -m workloads.features run` end to end (what `make features` runs; its `main`
in this process), then the registered version served over V2 by the server `run`
starts, asked with tritonclient, an independent V2 client:

- by entity key, the predictor answers with the online features behind the prediction;
  a test changes a customer's feature value in the source, materialises, and sees the
  prediction's input (and the probability) change accordingly;
- raw feature values give the same answer as the key whose features they are;
- bad requests are 400s naming the problem, and the server stays up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.features.in_process import features
from workloads.features import __main__ as features_main
from workloads.features import model, repo
from workloads.features import server as server_module
from workloads.features.data import ACTIVITY_FILE

NAME = "smb-churn"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`run` end to end in this process (`tests.features.in_process`), and the V2 server
    it starts on the registered version (``serve --model-dir <workdir>/served/1``): kept
    running for the tests below instead of being stopped when `run` ends, and stopped
    as `run` stops it once they are done."""
    work = tmp_path_factory.mktemp("features") / "work"
    urls: list[str] = []
    with contextlib.ExitStack() as kept, pytest.MonkeyPatch.context() as patch:

        def keep_running(*args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[str]:
            urls.append(kept.enter_context(server_module.running_server(*args, **kwargs)))
            return contextlib.nullcontext(urls[-1])

        patch.setattr(features_main, "running_server", keep_running)
        result = features("run", "--workdir", str(work), "--customers", "300", "--weeks", "16",
                          "--threads", "1")  # fmt: skip
        patch.undo()
        assert result.returncode == 0, result.stderr[-3000:]
        steps = [line.split("]")[0] + "]" for line in result.stdout.splitlines() if "[" in line]
        for step in ("data", "apply", "materialize", "train", "export", "register", "serve",
                     "predict", "done"):  # fmt: skip
            assert f"features [{step}]" in steps, result.stdout
        assert "churn probability" in result.stdout
        assert "Traceback" not in result.stderr
        (url,) = urls
        assert (work / "served" / "1" / model.ONNX_FILE).is_file()
        assert f"({work / 'served' / '1'}) on {url} (V2)" in result.stdout
        yield work, url.removeprefix("http://")


@pytest.fixture(scope="module")
def workdir(run: tuple[Path, str]) -> Path:
    return run[0]


@pytest.fixture(scope="module")
def server(run: tuple[Path, str]) -> str:
    """``host:port`` of the V2 server, ready (`running_server` waited for it)."""
    client = triton.InferenceServerClient(run[1])
    assert client.is_server_live() and client.is_model_ready(NAME)
    return run[1]


def by_key(url: str, keys: list[int]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    tensor = triton.InferInput(repo.JOIN_KEY, [len(keys)], "INT64")
    tensor.set_data_from_numpy(np.array(keys, dtype=np.int64), binary_data=False)
    result = triton.InferenceServerClient(url).infer(NAME, [tensor])
    return result.as_numpy("churn_probability"), result.as_numpy("features")


def onnx_of(workdir: Path, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    data = (workdir / "served" / "1" / model.ONNX_FILE).read_bytes()
    return model.onnx_probability(model.onnx_session(data, threads=1), x.astype(np.float32))


def test_metadata_lists_key_raw_inputs_and_outputs(server: str) -> None:
    meta = triton.InferenceServerClient(server).get_model_metadata(NAME)
    assert [i["name"] for i in meta["inputs"]] == [repo.JOIN_KEY, *repo.BASE_FEATURES]
    assert [o["name"] for o in meta["outputs"]] == ["churn_probability", "features"]


def test_get_model_config_reads_tritons_configuration(server: str) -> None:
    config = triton.InferenceServerClient(server).get_model_config(NAME)
    assert config["name"] == NAME
    assert [t["name"] for t in config["input"]] == [repo.JOIN_KEY, *repo.BASE_FEATURES]
    assert {t["name"]: t["data_type"] for t in config["output"]} == {
        "churn_probability": "TYPE_FP32",
        "features": "TYPE_FP32",
    }


def test_feasts_own_plan_in_the_repository_changes_nothing(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Feast's plan of the repository `run` made, computed as ``feast plan`` there
    computes it: Feast's parser reads the definitions file beside ``feature_store.yaml``
    and the store compares it with the registry. Nothing is to be created or deleted, in
    the registry or the infrastructure (without the file Feast would delete every
    object, and ``feast apply`` would do it).

    Feast 0.67 reports a materialised feature view as updated whatever the files say:
    the registry's copy carries the materialised intervals, and the plan prints its
    source's creation time. With those equal, each object is the registry's."""
    from feast import FeatureStore  # noqa: PLC0415 - Feast's own plan
    from feast.diff.property_diff import TransitionType  # noqa: PLC0415
    from feast.repo_operations import parse_repo  # noqa: PLC0415

    repo_dir = workdir / "repo"
    assert (repo_dir / repo.DEFINITIONS_FILE).is_file()
    monkeypatch.chdir(repo_dir)  # the parser names a file's module by its path from here
    monkeypatch.syspath_prepend(str(repo_dir))  # as the CLI does (cli_check_repo)
    registry_diff, infra_diff, _ = FeatureStore(repo_path=str(repo_dir)).plan(parse_repo(repo_dir))
    names = {d.name for d in registry_diff.feast_object_diffs}
    assert names >= {repo.ENTITY, repo.PROFILE_VIEW, repo.ACTIVITY_VIEW, repo.RATIOS_VIEW,
                     repo.FEATURE_SERVICE}  # fmt: skip
    for diff in registry_diff.feast_object_diffs:
        assert diff.transition_type in (TransitionType.UNCHANGED, TransitionType.UPDATE), (
            diff.transition_type, diff.name)  # fmt: skip
        if diff.transition_type == TransitionType.UPDATE:
            assert [p.property_name for p in diff.feast_object_property_diffs] == [
                "batch_source"
            ], diff.name
            current, desired = diff.current_feast_object, diff.new_feast_object
            desired.materialization_intervals = current.materialization_intervals
            assert current == desired, diff.name
            sources = [current.batch_source.to_proto(), desired.batch_source.to_proto()]
            for source in sources:
                source.ClearField("meta")  # created and updated times
            assert sources[0] == sources[1], diff.name
    changes = [d for d in infra_diff.infra_object_diffs if d.transition_type.name != "UNCHANGED"]
    assert not changes, infra_diff.to_string()


def test_prediction_by_key_has_the_online_features_behind_it(server: str, workdir: Path) -> None:
    activity = pd.read_parquet(workdir / "data" / ACTIVITY_FILE)
    keys = sorted(activity["customer_id"].unique().tolist())[:3]
    probability, features = by_key(server, keys)
    assert features.shape == (3, len(repo.MODEL_FEATURES))
    latest = activity.sort_values("event_timestamp").groupby("customer_id").last()
    logins = features[:, repo.MODEL_FEATURES.index("logins_7d")]
    np.testing.assert_array_equal(logins, latest.loc[keys, "logins_7d"].to_numpy())
    np.testing.assert_allclose(probability, onnx_of(workdir, features), atol=1e-7)


def test_changed_value_materialised_changes_the_prediction_input(
    server: str, workdir: Path
) -> None:
    path = workdir / "data" / ACTIVITY_FILE
    activity = pd.read_parquet(path)
    customer = int(activity["customer_id"].iloc[0])
    before_p, before_x = by_key(server, [customer])
    newest = activity[activity["customer_id"] == customer].iloc[-1].copy()
    newest["event_timestamp"] = newest["event_timestamp"] + timedelta(days=1)
    newest["logins_7d"] = 4321
    newest["support_tickets_30d"] = 55
    pd.concat([activity, newest.to_frame().T.astype(activity.dtypes)]).to_parquet(path)
    # Not materialised yet: the online store still has the old values.
    assert np.array_equal(by_key(server, [customer])[1], before_x)
    result = features("materialize", "--workdir", str(workdir))
    assert result.returncode == 0, result.stderr[-2000:]
    after_p, after_x = by_key(server, [customer])
    column = {name: i for i, name in enumerate(repo.MODEL_FEATURES)}
    assert after_x[0, column["logins_7d"]] == 4321
    assert after_x[0, column["support_tickets_30d"]] == 55
    # The on-demand ratio is recomputed by Feast from the new values.
    assert after_x[0, column["tickets_per_login"]] == pytest.approx(55 / 4322, rel=1e-6)
    # The other features are those of before, and the probability is the model's on
    # the new row.
    unchanged = [column[n] for n in ("plan_price_aed", "seats", "transactions_30d")]
    np.testing.assert_array_equal(after_x[0, unchanged], before_x[0, unchanged])
    np.testing.assert_allclose(after_p, onnx_of(workdir, after_x), atol=1e-7)
    assert after_p[0] != before_p[0]


def test_raw_values_give_the_same_answer_as_the_key(server: str, workdir: Path) -> None:
    activity = pd.read_parquet(workdir / "data" / ACTIVITY_FILE)
    customer = int(activity["customer_id"].iloc[-1])
    probability, features = by_key(server, [customer])
    inputs = []
    for name in repo.BASE_FEATURES:
        tensor = triton.InferInput(name, [1], "FP64")
        value = features[0, repo.MODEL_FEATURES.index(name)]
        tensor.set_data_from_numpy(np.array([value], dtype=np.float64), binary_data=False)
        inputs.append(tensor)
    result = triton.InferenceServerClient(server).infer(NAME, inputs)
    np.testing.assert_allclose(result.as_numpy("features"), features, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("churn_probability"), probability, atol=1e-6)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([(repo.JOIN_KEY, [1], "INT64", [987654])], "no features in the online store"),
        ([(repo.JOIN_KEY, [1], "FP32", [1.0])], "must be INT64 or INT32"),
        ([("seats", [1], "FP64", [3.0])], "send either one input"),
        ([(repo.JOIN_KEY, [1, 1], "INT64", [1000])], "must have shape [batch]"),
    ],
)
def test_bad_requests_are_400s_and_the_server_stays_up(
    server: str, inputs: list[tuple[str, list[int], str, list[Any]]], message: str
) -> None:
    client = triton.InferenceServerClient(server)
    tensors = []
    for name, shape, datatype, values in inputs:
        tensor = triton.InferInput(name, shape, datatype)
        dtype = (
            np.int64 if datatype == "INT64" else np.float64 if datatype == "FP64" else np.float32
        )
        array = np.array(values, dtype=dtype)
        tensor.set_data_from_numpy(array.reshape(shape), binary_data=False)
        tensors.append(tensor)
    with pytest.raises(InferenceServerException) as caught:
        client.infer(NAME, tensors)
    assert caught.value.status() == "400"
    assert message in caught.value.message()
    assert client.is_model_ready(NAME)
