"""`make serve-llm` checks every input before vLLM's half-minute start: each mistake is
one line naming what to fix and a non-zero exit, no traceback, and no vLLM started."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.llm.conftest import make_serve_llm_command
from tests.support.user_errors import MAKE_LINE, make_command
from tests.workloads.helpers import free_port
from workloads.llm import serve

ROOT = Path(__file__).resolve().parents[2]


def refused(*args: str) -> str:
    """Run the server command (or make's); assert it refused in one line (exit 2, and
    make's own line about the failed recipe); that line."""
    result = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    lines = [line for line in result.stderr.strip().splitlines() if not MAKE_LINE.match(line)]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def serve_llm(model: Path | str, port: int) -> list[str]:
    return make_serve_llm_command(model, port)


@pytest.fixture
def copy_of(tiny_model: Path, tmp_path: Path) -> Path:
    """A copy of the tiny model (config only: no check reads the weights)."""
    out = tmp_path / "model"
    out.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model / name, out / name)
    return out


def test_no_model_given() -> None:
    line = refused(*make_command(["serve-llm", "MODEL="]))
    assert line.startswith("serve-llm: give MODEL=")


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("hf://openai-community/gpt2", "is a hub address"),
        ("https://huggingface.co/openai-community/gpt2", "is a hub address"),
        ("openai-community/gpt2", "no such directory (a hub id?"),
        ("build/no-such-model", "no such directory"),
    ],
)
def test_hub_ids_and_missing_folders(model: str, says: str) -> None:
    line = refused(*serve_llm(model, free_port()))
    assert line.startswith(f"serve-llm: MODEL={model}")
    assert says in line


def test_a_folder_without_config_json(copy_of: Path) -> None:
    (copy_of / "config.json").unlink()
    assert "has no config.json" in refused(*serve_llm(copy_of, free_port()))


def test_a_folder_without_tokenizer(copy_of: Path) -> None:
    (copy_of / "tokenizer.json").unlink()
    (copy_of / "tokenizer_config.json").unlink()
    assert "has no tokenizer" in refused(*serve_llm(copy_of, free_port()))


def test_a_head_size_the_cpu_attention_does_not_run(copy_of: Path) -> None:
    config = json.loads((copy_of / "config.json").read_text())
    config["n_embd"], config["n_head"] = 32, 2  # head size 16: every request would fail
    (copy_of / "config.json").write_text(json.dumps(config))
    line = refused(*serve_llm(copy_of, free_port()))
    assert "attention head size 16" in line
    # The sizes the installed vLLM runs, asked of it.
    runs = line.split("(it runs ")[1].split(")")[0].split(", ")
    assert "32" in runs
    assert "16" not in runs


def test_a_busy_port(copy_of: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        line = refused(*serve_llm(copy_of, port))
    assert f"PORT={port} on 127.0.0.1 is in use" in line


def test_a_context_longer_than_the_models(copy_of: Path) -> None:
    command = [*serve_llm(copy_of, free_port()), "--max-model-len", "4096"]
    assert "MAX_MODEL_LEN=4096: give 1-128" in refused(*command)


def test_a_kv_cache_larger_than_half_the_memory(copy_of: Path) -> None:
    command = [*serve_llm(copy_of, free_port()), "--kv-cache-gib", "100000"]
    assert "KV_CACHE_GIB=100000" in refused(*command)


def test_the_command_is_bounded_and_local(tiny_model: Path, copy_of: Path) -> None:
    model = serve.model_folder(str(tiny_model))
    command = serve.server_command(
        model, name="tiny", port=8080, max_model_len=model.context, kv_bytes=2**28
    )
    flags = dict(zip(command[3::2], command[4::2], strict=False))
    assert flags["--host"] == "127.0.0.1"
    assert flags["--dtype"] == "float32"
    assert flags["--max-model-len"] == "128"
    assert flags["--kv-cache-memory-bytes"] == str(2**28)
    # make export-hf's folder carries its chat template: vLLM serves that one.
    assert serve.has_chat_template(tiny_model) and "--chat-template" not in command
    # A model without one gets the template shipped beside the server.
    (copy_of / "chat_template.jinja").unlink(missing_ok=True)
    settings = json.loads((copy_of / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (copy_of / "tokenizer_config.json").write_text(json.dumps(settings))
    bare = serve.model_folder(str(copy_of))
    command = serve.server_command(
        bare, name="tiny", port=8080, max_model_len=bare.context, kv_bytes=2**28
    )
    assert command[-2:] == ["--chat-template", str(serve.CHAT_TEMPLATE)]
    env = serve.server_environment({"VLLM_API_KEY": "k", "HF_HUB_OFFLINE": "0"})
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_API_KEY"] == "k"
    assert env["VLLM_NO_USAGE_STATS"] == "1"


def test_a_registry_alias_that_does_not_exist(tmp_path: Path) -> None:
    """models:/ goes through the lifecycle environment's MLflow client (an empty
    registry here): one line, before any vLLM."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    line = refused(
        *make_command(["serve-llm", "MODEL=models:/tiny@champion", f"TRACKING_URI={store}",
                       f"PORT={free_port()}"])
    )  # fmt: skip
    assert "has no model 'tiny' with alias 'champion'" in line


def test_a_malformed_registry_uri(tmp_path: Path) -> None:
    line = refused(
        *make_command(["serve-llm", "MODEL=models:/tiny",
                       f"TRACKING_URI=sqlite:///{tmp_path / 'mlflow.db'}"])
    )  # fmt: skip
    assert "give models:/<name>@<alias>" in line
