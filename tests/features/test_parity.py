"""The ONNX export against the native LightGBM model: churn probabilities within the
derived float32 bound on held-out rows, and a conversion that changes the model is
refused (nothing written)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from tests.features.test_point_in_time import apply_store
from workloads.features import data, model


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, model.TrainingSet]:
    dataset = data.generate(customers=400, weeks=20, seed=3)
    store = apply_store(tmp_path_factory.mktemp("parity"), dataset)
    training = model.training_set(store, dataset.labels)
    classifier, metrics = model.train(training, seed=3, threads=1)
    # The model learnt something (the churn signal is real), so parity is about a
    # non-trivial ensemble.
    assert metrics["valid_auc"] > 0.65
    return classifier, training


def test_onnx_probabilities_match_lightgbm(trained: tuple[Any, model.TrainingSet]) -> None:
    classifier, training = trained
    onnx_bytes, parity = model.export_onnx(classifier, training.x_valid)
    assert parity.rows == len(training.x_valid) > 100
    assert parity.trees == model.PARAMS["n_estimators"]
    assert parity.max_abs_diff <= parity.bound < 1e-4
    # Recomputed here, on the training rows too (not only the rows the export checked).
    session = model.onnx_session(onnx_bytes, threads=1)
    for x in (training.x_train, training.x_valid):
        native = classifier.predict_proba(x)[:, 1]
        got = model.onnx_probability(session, x)
        assert np.max(np.abs(native - got)) <= parity.bound
    # Both outputs are declared per row (the converter declares the label as [1]).
    graph = onnx.load_from_string(onnx_bytes).graph
    assert [o.type.tensor_type.shape.dim[0].dim_param for o in graph.output] == ["batch"] * 2


def test_a_changed_conversion_fails_the_export(
    trained: tuple[Any, model.TrainingSet], monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxmltools  # noqa: PLC0415 - the module whose function is replaced

    classifier, training = trained
    convert = onnxmltools.convert_lightgbm

    def off_by_a_little(*args: Any, **kwargs: Any) -> Any:
        converted = convert(*args, **kwargs)
        for node in converted.graph.node:
            for attribute in node.attribute:
                if attribute.name == "class_weights":  # the leaf values
                    attribute.floats[0] += 0.05
        return converted

    monkeypatch.setattr(onnxmltools, "convert_lightgbm", off_by_a_little)
    with pytest.raises(model.ModelError, match="conversion is wrong"):
        model.export_onnx(classifier, training.x_valid)


def test_parity_bound_is_the_float32_worst_case(trained: tuple[Any, model.TrainingSet]) -> None:
    classifier, _ = trained
    bound, trees = model.parity_bound(classifier.booster_)
    dump = classifier.booster_.dump_model()["tree_info"]

    def largest(node: dict[str, Any]) -> float:
        if "leaf_value" in node:
            return abs(node["leaf_value"])
        return max(largest(node["left_child"]), largest(node["right_child"]))

    total = sum(largest(t["tree_structure"]) for t in dump)
    assert trees == len(dump)
    assert bound == pytest.approx(0.25 * trees * 2.0**-24 * total + 4 * 2.0**-24)
