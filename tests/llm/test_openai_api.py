"""`make serve-llm` through the `openai` client, as a user calls it: the model is listed,
completes, chats with the chat template, streams both; a bad request is an OpenAI-shaped
error the client raises as its own exception (not a traceback, not a 500); the API key
is required. Greedy completions equal transformers' greedy generation of the same
folder, token for token: vLLM serves the model it was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from transformers import AutoTokenizer

from tests.llm.conftest import Server
from workloads.llm.serve import CHAT_TEMPLATE, has_chat_template

PROMPT = "The "
NEW = 8
MESSAGES: list[Any] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "مرحبا, hello"},
]


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=server.key, max_retries=0, timeout=60)


def greedy_ids(model: Path, prompt: str, new: int) -> list[int]:
    """transformers' greedy continuation of ``prompt`` (fp32, CPU): the reference."""
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    out = lm.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)
    return [int(t) for t in out[0, ids.shape[1] :]]


def token_ids(choice_logprobs: Any) -> list[int]:
    """The token ids of a completion asked with ``return_tokens_as_token_ids``."""
    return [int(token.removeprefix("token_id:")) for token in choice_logprobs.tokens]


def test_the_model_is_listed(client: openai.OpenAI, server: Server) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [server.name]
    assert models[0].model_extra is not None
    assert models[0].model_extra["max_model_len"] == 128  # the model's n_positions


def test_a_greedy_completion_is_transformers_greedy_generation(
    client: openai.OpenAI, server: Server
) -> None:
    answer = client.completions.create(
        model=server.name, prompt=PROMPT, max_tokens=NEW, temperature=0, logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.finish_reason == "length"
    assert answer.usage is not None
    # The byte tokenizer: one token per byte of the prompt.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(PROMPT), NEW)
    assert choice.logprobs is not None
    assert token_ids(choice.logprobs) == greedy_ids(server.model, PROMPT, NEW)


def test_a_chat_uses_the_chat_template(client: openai.OpenAI, server: Server) -> None:
    answer = client.chat.completions.create(
        model=server.name, messages=MESSAGES, max_tokens=4, temperature=0
    )
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason == "length"
    # The prompt vLLM ran is the template's rendering: the model's own, else the one
    # serve-llm ships.
    tokenizer = AutoTokenizer.from_pretrained(server.model)
    template = None if has_chat_template(server.model) else CHAT_TEMPLATE.read_text()
    rendered = tokenizer.apply_chat_template(
        MESSAGES, chat_template=template, add_generation_prompt=True, tokenize=False
    )
    assert rendered.endswith("assistant: ") or template is None
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(tokenizer(rendered)["input_ids"])


def test_a_completion_streams_the_same_tokens(client: openai.OpenAI, server: Server) -> None:
    whole = client.completions.create(
        model=server.name, prompt=PROMPT, max_tokens=NEW, temperature=0
    )
    chunks = list(
        client.completions.create(
            model=server.name, prompt=PROMPT, max_tokens=NEW, temperature=0, stream=True
        )
    )
    # One event per token (a byte may be half a character: then its text waits for the
    # next), and the last says why it ended.
    assert len(chunks) >= 2
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text


def test_a_chat_streams(client: openai.OpenAI, server: Server) -> None:
    stream = client.chat.completions.create(
        model=server.name, messages=MESSAGES, max_tokens=4, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4


def test_max_tokens_beyond_the_context_is_a_400(client: openai.OpenAI, server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=server.name, prompt=PROMPT, max_tokens=1000)
    assert raised.value.status_code == 400
    error = raised.value.response.json()["error"]
    assert error["param"] == "max_tokens"
    assert "max_model_len" in error["message"]


def test_an_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=2)
    assert raised.value.response.json()["error"]["param"] == "model"


def test_the_api_key_is_required(server: Server) -> None:
    stranger = openai.OpenAI(base_url=server.url, api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()


def test_the_server_answers_after_the_errors(client: openai.OpenAI, server: Server) -> None:
    answer = client.completions.create(model=server.name, prompt="x", max_tokens=1)
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 1
    assert "Traceback" not in server.output()
