"""Every sampled turn trains at the sampling parameters it was drawn with, and nothing else shapes
what is sampled.

The server records them on each choice (`art_sampling`: temperature, top_p, top_k, min_p, whether
response_format constrained it, the engine), on all three APIs, beside the choice's provenance tag;
the trainer scores each turn under that turn's own distribution (temperature, then min-p, top-k and
top-p truncation, core/distribution.py). So on an fp32 model the first update's trainer/sampler gap is
rounding, whatever the rollouts were sampled with and without `temperature` given to train. Before
this, one step trained without `temperature` measured gaps of 0.84 (rollouts at 0.6), 0.32 (1.4)
and 0.33 (0.8, top_p 0.9). What the trainer cannot score (penalties, logit biases, banned words) is a
400 naming it, and a base model's generation_config.json adds nothing behind the trainer's back."""

from __future__ import annotations

import json

import pytest

from dialects import messages_body, responses_body
from rl import choice_item, sample, step

PROMPTS = [[{"role": "user", "content": q}] for q in ("Name a colour.", "Write one word about the sea.")]
CASES = {
    "temperature 0.6": {"temperature": 0.6},
    "temperature 1.4": {"temperature": 1.4},
    "temperature 0.8, top_p 0.9": {"temperature": 0.8, "top_p": 0.9},
    "top_k 5": {"top_k": 5},
    "temperature 0.7, top_p 0.8, top_k 20": {"temperature": 0.7, "top_p": 0.8, "top_k": 20},
    "min_p 0.05": {"min_p": 0.05},
    "temperature 0.9, min_p 0.02, top_p 0.95": {"temperature": 0.9, "min_p": 0.02, "top_p": 0.95},
}
NEUTRAL = {"min_p": 0.0, "constrained": False}  # what a choice records of parameters its request left out


def rollouts(client, model: str, seed: int, **params) -> list[list[dict]]:
    """Two groups of 6 rollouts (12 in all) of 8 tokens, with made-up rewards that differ."""
    groups = []
    for g, prompt in enumerate(PROMPTS):
        body = {"model": model, "messages": prompt, "n": 6, "max_tokens": 8, "seed": seed + g, **params}
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        groups.append(
            [
                {"messages_and_choices": [*prompt, choice_item(r.json(), ch)], "reward": float(i % 3)}
                for i, ch in enumerate(r.json()["choices"])
            ]
        )
    return groups


def register(client, name: str) -> None:
    r = client.post("/v1/art/models/register", json={"name": name, "project": "sampling", "base_model": "builtin:tiny"})
    assert r.status_code == 200, r.text


def test_every_api_records_the_sampling_parameters_of_each_choice(client):
    params = {"temperature": 0.7, "top_p": 0.9}
    recorded = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, **NEUTRAL, "engine": "hf"}
    chat = sample(client, "builtin:tiny", PROMPTS[0], 2, 4, seed=1, temperature=0.7)
    assert [c["art_sampling"] for c in chat["choices"]] == [{**recorded, "top_p": 1.0}] * 2
    chat = client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 4, **params})
    assert chat.json()["choices"][0]["art_sampling"] == recorded
    plain = client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 2})
    assert plain.json()["choices"][0]["art_sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, **NEUTRAL, "engine": "hf"}
    min_p = client.post(
        "/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 2, "min_p": 0.1}
    )
    assert min_p.json()["choices"][0]["art_sampling"]["min_p"] == 0.1
    greedy = client.post(
        "/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 2, "temperature": 0}
    )
    assert greedy.json()["choices"][0]["art_sampling"]["temperature"] == 0
    # Streamed: on the chunk that finishes the choice, with its provenance tag.
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 4, "stream": True, **params},
    ) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    finishing = [c for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")]
    assert finishing[0]["art_sampling"] == recorded and finishing[0]["art_provenance"]
    # The Responses API and the Messages API: at the top of the answer, named as on a chat choice.
    r = client.post("/v1/responses", json=responses_body("builtin:tiny", temperature=0.7, top_p=0.9))
    assert r.status_code == 200, r.text
    assert r.json()["art_sampling"] == recorded
    r = client.post("/v1/messages", json=messages_body("builtin:tiny", temperature=0.7, top_k=3))
    assert r.status_code == 200, r.text
    assert r.json()["art_sampling"] == {**recorded, "top_p": 1.0, "top_k": 3}


@pytest.mark.parametrize("case", list(CASES))
def test_the_first_update_scores_each_turn_as_it_was_sampled(client, case):
    name = "as-sampled-" + "".join(ch for ch in case if ch.isalnum())
    register(client, name)
    groups = rollouts(client, name, seed=7, **CASES[case])
    lines = step(client, name, groups, learning_rate=1e-9)  # no temperature given: each turn's own is used
    metrics = lines[-1]["metrics"]
    print(
        f"\n{case}: sampler_logprob_diff_mean {metrics['sampler_logprob_diff_mean']:.2e}, max {metrics['sampler_logprob_diff_max']:.2e}"
    )
    assert metrics["sampler_logprob_diff_mean"] < 1e-4, metrics
    assert metrics["sampler_logprob_diff_max"] < 1e-3, metrics
    assert metrics["tokens_trained"] > 40, metrics  # 12 rollouts of up to 8 tokens were scored
    assert not [line for line in lines if line["type"] == "warning"], lines


def test_a_temperature_given_to_train_overrides_with_a_warning_and_unrecorded_turns_say_so(client):
    register(client, "override")
    groups = rollouts(client, "override", seed=3, temperature=0.6)
    lines = step(client, "override", groups, learning_rate=1e-9, temperature=1.0)
    warnings = [line["message"] for line in lines if line["type"] == "warning"]
    assert len(warnings) == 1 and "temperature 1 given to train overrides" in warnings[0] and "12 at 0.6" in warnings[0], warnings
    assert lines[-1]["metrics"]["sampler_logprob_diff_mean"] > 0.05  # scored at 1.0, as asked: the old gap
    # The same temperature given as recorded: no warning, no gap.
    register(client, "same")
    lines = step(client, "same", rollouts(client, "same", seed=3, temperature=0.6), learning_rate=1e-9, temperature=0.6)
    assert not [line for line in lines if line["type"] == "warning"] and lines[-1]["metrics"]["sampler_logprob_diff_mean"] < 1e-4
    # Pushed by hand (no provenance tag, no art_sampling): one notice that says what to do.
    register(client, "by-hand")
    bare = rollouts(client, "by-hand", seed=3, temperature=0.6)
    for group in bare:
        for t in group:
            for key in ("art_provenance", "art_sampling"):
                t["messages_and_choices"][-1].pop(key)
    lines = step(client, "by-hand", bare, learning_rate=1e-9)
    notices = [line["message"] for line in lines if line["type"] == "warning" and "art_sampling" in line["message"]]
    assert len(notices) == 1 and "12 sampled turn(s)" in notices[0] and "give train the temperature" in notices[0], notices


def test_a_tagged_choice_whose_art_sampling_was_dropped_trains_with_the_notice(client):
    """art_sampling rides beside the provenance tag, unsigned (as art_policy_step): a client that drops
    it (an older art-ts) is not refused; the step says what it assumed."""
    register(client, "dropped")
    groups = rollouts(client, "dropped", seed=5, temperature=0.6)
    groups[0][0]["messages_and_choices"][-1].pop("art_sampling")
    lines = step(client, "dropped", groups, learning_rate=1e-9)
    notices = [line["message"] for line in lines if line["type"] == "warning"]
    assert len(notices) == 1 and notices[0].startswith("1 sampled turn(s) carry no art_sampling"), notices


def test_truncated_sampling_is_scored_truncated_measured_against_the_full_distribution(client):
    """The choice made for top_p < 1 / top_k > 0, measured: the same rollouts scored under the truncated
    distribution they were drawn from (what the trainer does) and under the full one (what it would
    do if it ignored truncation; here by sending them untagged with temperature given). The full
    one's logprob of each token is its truncated logprob plus log(kept mass) < 0, so the gap is large
    and one-sided, and the sampler correction weights each token by the kept mass (< 1): positions
    where the model was unsure would count less, a bias, not a correction."""
    register(client, "truncated")
    register(client, "full")
    groups = rollouts(client, "truncated", seed=11, temperature=1.0, top_p=0.8)
    truncated = step(client, "truncated", groups, learning_rate=1e-9)[-1]["metrics"]
    for group in groups:
        for t in group:
            for key in ("art_provenance", "art_sampling"):
                t["messages_and_choices"][-1].pop(key)
    full = step(client, "full", groups, learning_rate=1e-9, temperature=1.0)[-1]["metrics"]
    keys = ("sampler_logprob_diff_mean", "sampler_logprob_diff_max", "sampler_weight_mean")
    print(
        "\ntop_p 0.8, truncated:",
        {k: round(truncated[k], 6) for k in keys},
        "\ntop_p 0.8, full:     ",
        {k: round(full[k], 6) for k in keys},
    )
    assert truncated["sampler_logprob_diff_mean"] < 1e-4 and abs(truncated["sampler_weight_mean"] - 1) < 1e-4, truncated
    assert full["sampler_logprob_diff_mean"] > 0.05 and full["sampler_weight_mean"] < 0.97, full


UNSCORED_REQUESTS = {
    "repetition_penalty": 1.3,
    "frequency_penalty": 0.5,
    "presence_penalty": -0.2,
    "logit_bias": {"5": 3.0},
    "min_tokens": 4,
    "bad_words": ["sea"],
    "allowed_token_ids": [1, 2, 3],
    "guided_json": {"type": "object"},
}


@pytest.mark.parametrize("field", list(UNSCORED_REQUESTS))
def test_a_parameter_the_trainer_cannot_score_is_a_400_that_names_it_on_every_api(client, field):
    """On the hf engine `repetition_penalty` was accepted and silently ignored (an extra field), and
    vLLM would apply it: either way a turn would train against a distribution nobody sampled from."""
    value = UNSCORED_REQUESTS[field]
    body = {"model": "builtin:tiny", "messages": PROMPTS[0], "max_tokens": 2, field: value}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert field in message and "not supported" in message and "trainer does not score" in message, message
    # The Responses and Messages APIs have no such fields: a 400 naming it, too.
    for path, make in (("/v1/responses", responses_body), ("/v1/messages", messages_body)):
        r = client.post(path, json=make("builtin:tiny", **{field: value}))
        assert r.status_code == 400 and field in r.text, (path, r.text)


def test_neutral_values_of_those_parameters_are_accepted(client):
    body = {
        "model": "builtin:tiny",
        "messages": PROMPTS[0],
        "max_tokens": 2,
        "repetition_penalty": 1.0,
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "logit_bias": {},
        "min_tokens": 0,
    }
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def penalised(tmp_path_factory, tiny_path):
    """builtin:tiny as a folder whose generation_config.json asks for what Qwen2.5's does and more:
    a repetition penalty, a lower temperature, top-k and min-p."""
    import shutil

    from conftest import start_server

    folder = tmp_path_factory.mktemp("penalised") / "tiny-penalised"
    shutil.copytree(tiny_path, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update({"repetition_penalty": 1.3, "temperature": 0.5, "top_k": 20, "min_p": 0.1, "do_sample": True})
    (folder / "generation_config.json").write_text(json.dumps(config))
    srv = start_server(tmp_path_factory.mktemp("penalised-data"), "--base-model", str(folder))
    yield srv, str(folder)
    srv.stop()


def test_a_base_models_generation_config_adds_nothing_to_what_is_sampled_or_scored(penalised):
    """The hf engine's sampler never read generation_config.json; the server says at start what the
    file suggests and that it is not applied, and a default request samples (and records) the neutral
    distribution, which the first update scores exactly. (The vllm engine's counterpart, where vLLM
    applied the file by default: test_vllm_real.py.)"""
    srv, folder = penalised
    said = [line for line in srv.stderr_lines if "generation_config.json suggests" in line]
    assert len(said) == 1 and "repetition_penalty 1.3" in said[0] and "does not apply" in said[0], srv.stderr_lines[-20:]
    with srv.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "p", "project": "sampling", "base_model": folder})
        assert r.status_code == 200, r.text
        groups = rollouts(c, "p", seed=2)
        assert {json.dumps(t["messages_and_choices"][-1]["art_sampling"]) for g in groups for t in g} == {
            json.dumps({"temperature": 1.0, "top_p": 1.0, "top_k": 0, **NEUTRAL, "engine": "hf"})
        }
        metrics = step(c, "p", groups, learning_rate=1e-9)[-1]["metrics"]
    print(f"\nhf, generation_config with penalties: gap {metrics['sampler_logprob_diff_mean']:.2e}")
    assert metrics["sampler_logprob_diff_mean"] < 1e-4, metrics


def test_constrained_choices_are_marked_and_refused_by_the_trainer_unless_asked_for(client):
    """response_format's schema is enforced token by token, so a constrained choice's logprobs are of
    the constrained distribution; the trainer scores the unconstrained model. Such choices say so
    (art_sampling.constrained) and a step refuses them with a 400 naming the option; with it, they
    train with a warning."""
    register(client, "constrained")
    groups = rollouts(client, "constrained", seed=9, response_format={"type": "json_object"})
    assert all(t["messages_and_choices"][-1]["art_sampling"]["constrained"] for g in groups for t in g)
    body = {"groups": groups, "config": {"learning_rate": 1e-9}}
    r = client.post("/v1/art/models/constrained/train", json=body)
    assert r.status_code == 400, r.text
    assert "response_format" in r.text and "allow_constrained_choices" in r.text
    assert client.get("/v1/art/models/constrained").json()["step"] == 0  # nothing trained
    lines = step(client, "constrained", groups, learning_rate=1e-9, allow_constrained_choices=True)
    warnings = [line["message"] for line in lines if line["type"] == "warning"]
    assert any("trained against the unconstrained model" in w for w in warnings), warnings
    assert lines[-1]["step"] == 1
