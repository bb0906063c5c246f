"""Typed training config: presets, validation (every problem at once), overrides."""

from __future__ import annotations

import dataclasses

import pytest

from modules.validation import InvalidArgsError
from workloads.training import train
from workloads.training.config import (
    PRESETS,
    ModelConfig,
    TrainConfig,
    field_docs,
    override,
    preset,
)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_valid(name: str) -> None:
    config = preset(name)
    assert config.preset == name
    assert config.seq_len <= config.model.block_size


def test_gpt2_vocabulary_is_padded_to_a_multiple_of_64() -> None:
    model = preset("gpt2-124m").model
    assert model.vocab_size == 50257
    assert model.padded_vocab_size() == 50304
    assert model.padded_vocab_size(pad=False) == 50257


def test_unknown_preset_names_the_presets() -> None:
    with pytest.raises(InvalidArgsError) as err:
        preset("gpt5")
    assert "tiny" in str(err.value) and "gpt2-124m" in str(err.value)


def test_model_validation_collects_every_problem() -> None:
    with pytest.raises(InvalidArgsError) as err:
        ModelConfig(n_layer=0, n_head=3, n_embd=64, block_size=128, vocab_size=70000)
    fields = {p.field for p in err.value.problems}
    assert fields == {"n_layer", "n_embd", "vocab_size"}


def test_override_reports_conversion_and_validation_problems_together() -> None:
    with pytest.raises(InvalidArgsError) as err:
        override(
            preset("tiny"),
            {
                "steps": "-1",
                "dtype": "fp16",
                "compile": "maybe",
                "n_head": "3",
                "nope": "1",
                "metrics_port": "9400",
            },
        )
    fields = {p.field for p in err.value.problems}
    assert fields == {"steps", "dtype", "compile", "n_embd", "nope", "metrics_port"}


def test_override_converts_types() -> None:
    config = override(
        preset("tiny"),
        {"steps": "7", "learning_rate": "0.01", "sdpa": "off", "compile": "on", "n_layer": "3"},
    )
    assert (config.steps, config.learning_rate, config.sdpa, config.compile) == (
        7,
        0.01,
        False,
        "on",
    )
    assert config.model.n_layer == 3


def test_every_field_has_help_text() -> None:
    docs = field_docs(ModelConfig) | field_docs(TrainConfig)
    names = {f.name for f in dataclasses.fields(ModelConfig)} | {
        f.name for f in dataclasses.fields(TrainConfig)
    }
    assert names - {"preset", "model"} <= set(docs)


def test_train_cli_bad_config_is_one_message_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = train.main(["--steps", "0", "--dtype", "fp64"])
    err = capsys.readouterr().err
    assert status == 2
    assert "invalid training config" in err
    assert "--steps" in err and "--dtype" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "uri", ["not-a-url", "htp:/nowhere", "http://", "http://host:port", "sqlite://"]
)
def test_a_tracking_uri_that_names_no_server_is_refused(uri: str) -> None:
    with pytest.raises(InvalidArgsError) as err:
        override(preset("tiny"), {"tracking_uri": uri})
    assert [p.field for p in err.value.problems] == ["tracking_uri"]


def test_a_tracking_servers_url_is_taken() -> None:
    for uri in ("http://127.0.0.1:5000", "https://mlflow.platform.svc:443", "sqlite:///m.db", ""):
        assert override(preset("tiny"), {"tracking_uri": uri}).tracking_uri == uri
