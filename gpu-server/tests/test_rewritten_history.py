"""Chat templates that are not append-only (issue 42; ART #726): Qwen3's template drops earlier turns'
reasoning, so a later turn's prompt no longer extends the tokens an earlier turn sampled. Here
builtin:tiny-forgetful, whose test template renders every assistant turn but the last empty, serves
a two-turn conversation; the server renders each call's prompt as the trainer does, and the step
trains each turn as its own sequence, counts them, and says why in one warning naming the template."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from art_server.models.builtin import builtin_path

from conftest import ServerProcess, start_server
from rl import choice_item, sample, step

BASE = "builtin:tiny-forgetful"
FIRST = [{"role": "user", "content": "Name an empty cell."}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("forgetful"), "--base-model", BASE)
    yield s
    s.stop()


def two_turn_group(c, name: str, seed: int) -> list[dict]:
    first = sample(c, name, FIRST, 4, 4, seed=seed)
    group = []
    for t, choice in enumerate(first["choices"]):
        second_prompt = [*FIRST, choice["message"], {"role": "user", "content": "Another one."}]
        second = sample(c, name, second_prompt, 1, 4, seed=seed * 10 + t)
        group.append(
            {
                "messages_and_choices": [
                    *FIRST,
                    choice_item(first, choice),
                    second_prompt[-1],
                    choice_item(second, second["choices"][0]),
                ],
                "reward": float(t % 2),
            }
        )
    return group


def test_turns_of_a_template_that_rewrites_history_train_as_their_own_sequences(srv: ServerProcess):
    tokenizer = AutoTokenizer.from_pretrained(str(builtin_path(BASE, Path(srv.data_dir))))
    with srv.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "forgetful", "project": "templates", "base_model": BASE})
        assert r.status_code == 200, r.text
        group = two_turn_group(c, "forgetful", seed=1)
        for trajectory in group:
            items = trajectory["messages_and_choices"]
            first, second = items[1], items[3]
            # The second call's prompt is what the template renders (the first answer dropped)...
            messages = [FIRST[0], first["message"], items[2]]
            rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
            assert second["prompt_token_ids"] == list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
            # ...so it does not extend the tokens the first turn sampled.
            sampled = first["prompt_token_ids"] + first["token_ids"]
            assert second["prompt_token_ids"][: len(sampled)] != sampled
        warnings = []
        for s in range(2):
            lines = step(c, "forgetful", [group if s == 0 else two_turn_group(c, "forgetful", seed=2)], learning_rate=1e-2)
            result = lines[-1]["metrics"]
            assert result["trajectories_trained"] == 4
            assert result["sequences_split"] == 4 and result["sequences"] == 8  # each turn its own sequence
            warnings.append([line["message"] for line in lines if line["type"] == "warning" and "append-only" in line["message"]])
        assert len(warnings[0]) == 1 and f"the chat template of {BASE} is not append-only" in warnings[0][0]
        assert warnings[1] == warnings[0]  # the same words every step: a client shows it once


def test_the_warning_comes_only_with_turns_that_split(server: ServerProcess):
    with server.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "appends", "project": "templates", "base_model": "builtin:tiny"})
        assert r.status_code == 200, r.text
        lines = step(c, "appends", [two_turn_group(c, "appends", seed=1)], learning_rate=1e-2)
        result = lines[-1]["metrics"]
        # builtin:tiny's template is append-only: a turn splits only where re-tokenising an answer changed its ids.
        assert result["sequences"] == result["trajectories_trained"] + result["sequences_split"]
        warned = [line for line in lines[:-1] if line["type"] == "warning" and "append-only" in line["message"]]
        assert len(warned) == (1 if result["sequences_split"] else 0)
