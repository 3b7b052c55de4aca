"""Training over HTTP on builtin:tiny, as the client drives it: registration and checkpoints on disk,
GRPO steps, SFT, serving during training, history, and checkpoint deletion.

Over 400 lines: the training API's tests share one server and its registered models; split, each file would start its own.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from conftest import start_server
from rl import board_prompt, choice_item, sample, step

PROMPT = board_prompt("X . .\n. O .\n. . .")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tiny_path):
    data = tmp_path_factory.mktemp("train-data")
    srv = start_server(data, "--base-model", "builtin:tiny", "--gpu-cost-per-hour-usd", "3.6")
    yield srv
    srv.stop()


def register(client: httpx.Client, name: str, project: str = "tests", **extra) -> dict:
    r = client.post("/v1/art/models/register", json={"name": name, "project": project, "base_model": "builtin:tiny", **extra})
    assert r.status_code == 200, r.text
    return r.json()


def sampled_group(client: httpx.Client, model: str, rewards: list[float], seed: int = 0) -> list[dict]:
    r = sample(client, model, PROMPT, len(rewards), 6, seed=seed)
    return [
        {"messages_and_choices": [*PROMPT, choice_item(r, c)], "reward": reward, "metrics": {"hit": reward > 0}}
        for c, reward in zip(r["choices"], rewards)
    ]


# -- registration and the files ----------------------------------------------------------------


def test_registration_creates_step_zero_on_disk_as_a_plain_peft_adapter(trainer, tiny_path):
    with trainer.client() as c:
        info = register(c, "fresh")
    assert info["step"] == 0 and info["resumed"] is False and info["inference_name"] == "fresh@0"
    assert info["lora"] == {
        "r": 8,
        "alpha": 16,
        "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    }
    root = Path(info["path"])
    assert root == trainer.data_dir / "tests" / "models" / "fresh"
    assert json.loads((root / "model.json").read_text())["base_model"] == "builtin:tiny"
    ckpt = root / "checkpoints" / "0000"
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt", "state.json"} <= {p.name for p in ckpt.iterdir()}
    # Users can take it away: plain PEFT loads it, and step 0 is the identity.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    ids = torch.tensor([[1, 5, 9, 2]])
    with torch.no_grad():
        want = base(input_ids=ids).logits
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), ckpt)(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-6)
    # Every model's checkpoints name the base model, not only the first model's (PEFT's add_adapter,
    # used from the second model on, leaves it unset).
    with trainer.client() as c:
        second = Path(register(c, "fresh-second")["path"]) / "checkpoints" / "0000"
    for folder in (ckpt, second):
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "builtin:tiny"


def test_registering_again_resumes_and_conflicts_are_refused(trainer):
    with trainer.client() as c:
        register(c, "again")
        assert register(c, "again")["resumed"] is True
        r = c.post(
            "/v1/art/models/register", json={"name": "again", "project": "tests", "base_model": "builtin:tiny", "lora": {"r": 4}}
        )
        assert r.status_code == 409 and "LoRA config" in r.json()["error"]["message"]
        r = c.post("/v1/art/models/register", json={"name": "other", "project": "tests", "base_model": "builtin:small"})
        assert r.status_code == 409 and "holds base model 'builtin:tiny'" in r.json()["error"]["message"]
        r = c.post("/v1/art/models/register", json={"name": "again", "project": "elsewhere", "base_model": "builtin:tiny"})
        assert r.status_code == 409


@pytest.mark.parametrize("name, project", [("../escape", "tests"), ("ok", "../../etc"), ("a/b", "tests"), ("..", "tests")])
def test_names_that_could_escape_the_data_dir_are_400(trainer, name, project):
    with trainer.client() as c:
        r = c.post("/v1/art/models/register", json={"name": name, "project": project, "base_model": "builtin:tiny"})
    assert r.status_code == 400 and "invalid" in r.json()["error"]["message"]


# -- GRPO steps ----------------------------------------------------------------------------------


def test_a_grpo_step_streams_progress_then_the_result_and_serves_the_new_step(trainer):
    with trainer.client() as c:
        register(c, "stepper")
        groups = [sampled_group(c, "stepper", [1, 0, 0, 1, 0, 0, 0, 1], seed=s) for s in range(2)]
        lines = step(c, "stepper", groups, learning_rate=1e-2, gradient_steps=2, micro_batch_size=4)
        kinds = [line["type"] for line in lines]
        assert kinds[0] == "start" and kinds[-1] == "result" and kinds.count("progress") == 2
        progress = next(line for line in lines if line["type"] == "progress")
        for key in ("loss", "grad_norm", "clip_fraction", "approx_kl", "entropy", "lr", "tokens"):
            assert isinstance(progress[key], (int, float)) and math.isfinite(progress[key]), key
        result = lines[-1]
        assert result["step"] == 1
        m = result["metrics"]
        assert m["step"] == 0 and m["trained_into_step"] == 1 and m["split"] == "train"
        assert math.isclose(m["reward"], 3 / 8) and m["hit"] == 3 / 8
        assert m["groups_trained"] == 2 and m["groups_skipped"] == 0 and m["tokens_trained"] > 0
        for key in ("tokenize_s", "forward_backward_s", "save_s", "reload_s"):
            assert m[key] >= 0
        assert m["trainer_tokens_per_second"] > 0
        # The second gradient step's ratio is against the policy before the first: it moved.
        assert abs(m["importance_ratio_mean"] - 1) > 1e-4 and m["importance_ratio_max"] > 1, m
        models = [x["id"] for x in c.get("/v1/models").json()["data"]]
        assert "stepper@1" in models and "stepper@0" in models
        assert c.get("/v1/art/models/stepper").json()["step"] == 1
        # The new adapter differs from step 0.
        a = sample(c, "stepper@0", PROMPT, 1, 6, temperature=0)["choices"][0]["logprobs"]["content"][0]["logprob"]
        b = sample(c, "stepper", PROMPT, 1, 6, temperature=0)["choices"][0]["logprobs"]["content"][0]["logprob"]
        assert a != b
        root = Path(c.get("/v1/art/models/stepper").json()["path"])
    stored = [json.loads(line) for line in (root / "trajectories" / "train" / "0000.jsonl").read_text().splitlines()]
    assert len(stored) == 16 and stored[0]["group"] == 0 and stored[0]["reward"] == 1
    assert [r["step"] for r in map(json.loads, (root / "history.jsonl").read_text().splitlines())] == [0]


def test_a_sampler_that_scored_tokens_lower_is_corrected_not_clipped_in_every_gradient_step(trainer):
    """Choices whose logprobs say the sampler found each token e^0.5 times less likely than the
    trainer does (the tag dropped, so the server trusts them as sent): with the default correction
    (tis) the ratio starts at 1 in every gradient step (the later ones against logprobs recomputed
    before the first update) and the weight is e^0.5; without it every token starts clipped."""

    def shifted(groups: list[list[dict]]) -> list[list[dict]]:
        out = json.loads(json.dumps(groups))
        for group in out:
            for traj in group:
                for item in traj["messages_and_choices"]:
                    if item.get("kind") == "choice":
                        item.pop("art_provenance")
                        item["logprobs"] = [lp - 0.5 for lp in item["logprobs"]]
        return out

    with trainer.client() as c:
        for name in ("corrected", "uncorrected"):
            register(c, name)
        groups = [sampled_group(c, "corrected", [1, 0, 0, 1, 0, 0, 0, 1], seed=s) for s in range(2)]
        lines = step(c, "corrected", shifted(groups), learning_rate=1e-9, gradient_steps=2, micro_batch_size=4)
        progress = [line for line in lines if line["type"] == "progress"]
        assert [p["clip_fraction"] for p in progress] == [0, 0], progress
        m = lines[-1]["metrics"]
        # (the ratio is reported at the last gradient step: the first one's update, at lr 1e-9, moved it by ~1e-6)
        assert abs(m["importance_ratio_mean"] - 1) < 1e-4 and abs(m["importance_ratio_max"] - 1) < 1e-4, m
        assert abs(m["sampler_weight_mean"] - math.exp(0.5)) < 1e-3 and abs(m["sampler_logprob_diff_mean"] - 0.5) < 1e-3, m
        lines = step(
            c, "uncorrected", shifted(groups), learning_rate=1e-9, gradient_steps=2, micro_batch_size=4, sampler_correction="none"
        )
        assert [p["clip_fraction"] for p in lines if p["type"] == "progress"] == [1, 1]
        m = lines[-1]["metrics"]
        assert abs(m["importance_ratio_mean"] - math.exp(0.5)) < 1e-3 and m["sampler_weight_mean"] == 1, m


def test_a_kl_penalty_to_an_earlier_step_measures_distance_to_that_steps_adapter(trainer):
    """kl_ref_step: the KL penalty's reference is that step's adapter, not the base model. Right after
    step 1 the policy is step 1's adapter, so the first gradient step's KL to step 1 is exactly 0,
    while the KL to the base model is not. A kl_coef of 0 with a reference is a 400; a step with no
    checkpoint a 404."""
    with trainer.client() as c:
        register(c, "klref")
        step(c, "klref", [sampled_group(c, "klref", [1.0, 0.0, 0.5, 0.0])], learning_rate=5e-2)
        group = [sampled_group(c, "klref", [1.0, 0.0, 0.5, 0.0], seed=1)]
        to_step_1 = step(c, "klref", group, learning_rate=1e-9, kl_coef=0.5, kl_ref_step=1)  # from step 1 exactly
        to_base = step(c, "klref", group, learning_rate=1e-9, kl_coef=0.5)
        first = [next(line for line in lines if line["type"] == "progress") for lines in (to_base, to_step_1)]
        assert first[0]["kl_ref"] > 1e-4 and first[1]["kl_ref"] == 0.0, first
        for config, status, says in [
            ({"kl_ref_step": 1}, 400, "kl_coef is 0"),
            ({"kl_ref_step": 99, "kl_coef": 0.1}, 404, "no checkpoint of step 99"),
        ]:
            r = c.post("/v1/art/models/klref/train", json={"groups": group, "config": config})
            assert r.status_code == status and says in r.text, r.text


def test_a_step_records_its_wall_time_and_its_cost_at_the_hours_price(trainer):
    """step_s: the step's wall time on the server; sampling_s: its rollouts' gathering time, as the
    client measured it; cost_usd: both at the price sent with the step (the model's option), else at
    the server's --gpu-cost-per-hour-usd (3.6 here). SFT steps too, without sampling."""
    with trainer.client() as c:
        register(c, "priced")
        group = [sampled_group(c, "priced", [1.0, 0.0, 0.5, 0.0])]
        sft = {"conversations": [{"messages": [*PROMPT, {"role": "assistant", "content": "B2"}]}], "config": {"epochs": 1}}
        rows = []
        for path, body, price in [
            ("train", {"groups": group, "sampling_seconds": 100.0}, 3.6),
            ("train", {"groups": group, "sampling_seconds": 100.0, "gpu_cost_per_hour_usd": 36.0}, 36.0),
            ("train_sft", {**sft, "gpu_cost_per_hour_usd": 36.0}, 36.0),
        ]:
            started = time.perf_counter()
            r = c.post(f"/v1/art/models/priced/{path}", json=body)
            wall = time.perf_counter() - started
            assert r.status_code == 200, r.text
            row = json.loads(r.text.splitlines()[-1])["metrics"]
            sampling = body.get("sampling_seconds", 0.0)
            assert 0 < row["step_s"] <= wall and row.get("sampling_s", 0.0) == sampling, row
            assert row["gpu_cost_per_hour_usd"] == price, row
            assert row["cost_usd"] == pytest.approx(price * (sampling + row["step_s"]) / 3600), row
            rows.append(row)
        recorded = [r for r in c.get("/v1/art/models/priced/history").json()["rows"] if r["split"] in ("train", "sft")]
        assert [r["cost_usd"] for r in recorded] == [r["cost_usd"] for r in rows]
        for bad in (-1, "2.5", 1e6):
            r = c.post("/v1/art/models/priced/train", json={"groups": group, "gpu_cost_per_hour_usd": bad})
            assert r.status_code == 400 and "gpu_cost_per_hour_usd" in r.text, r.text


def test_a_step_and_a_log_record_what_judging_their_groups_cost(trainer):
    """judge_*: the judge calls the client made for the groups (rulerScoreGroup's), their tokens and
    their cost at the judge's price, recorded in the row as sent; a judge without a price sends no cost."""
    judged = {"judge_calls": 3, "judge_prompt_tokens": 1200, "judge_completion_tokens": 90, "judge_cost_usd": 0.00312}
    with trainer.client() as c:
        register(c, "judged")
        group = [sampled_group(c, "judged", [1.0, 0.0, 0.5, 0.0])]
        r = c.post("/v1/art/models/judged/train", json={"groups": group, **judged})
        assert r.status_code == 200, r.text
        row = json.loads(r.text.splitlines()[-1])["metrics"]
        assert {k: row.get(k) for k in judged} == judged, row
        unpriced = {k: v for k, v in judged.items() if k != "judge_cost_usd"}
        logged = c.post("/v1/art/models/judged/log", json={"groups": group, "split": "val", **unpriced}).json()
        assert {k: logged.get(k) for k in judged} == {**unpriced, "judge_cost_usd": None}, logged
        plain = c.post("/v1/art/models/judged/log", json={"groups": group}).json()
        assert not [k for k in plain if k.startswith("judge_")], plain
        for field, bad in (("judge_calls", -1), ("judge_cost_usd", float("nan")), ("judge_prompt_tokens", "12")):
            body = json.dumps({"groups": group, field: bad}).replace("NaN", "1e999")
            r = c.post("/v1/art/models/judged/log", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and field in r.text, r.text


def offline_group(answers: list[str]) -> list[dict]:
    """Logged conversations (plain messages, no token ids or logprobs), rewarded for naming B2."""
    return [{"messages_and_choices": [*PROMPT, {"role": "assistant", "content": a}], "reward": float(a == "B2")} for a in answers]


def test_plain_messages_train_with_allow_training_without_logprobs_and_the_reward_rises(trainer):
    """ART's allow_training_without_logprobs: trajectories of plain assistant messages (offline logs)
    train GRPO, their tokens scored by the policy at the start of the step (ratio 1, no sampler
    difference); without the option they are context only and a warning names it. On the toy task
    the policy's own answers then name B2 more often (sampled before and after, same seeds)."""
    answers = ["B2", "A1", "C3", "B2 is empty", "A3", "C1"]
    with trainer.client() as c:
        register(c, "offline")
        off = step(c, "offline", [offline_group(answers[:4])], learning_rate=5e-2)
        warning = next(line["message"] for line in off if line["type"] == "warning" and "no sampled choice" in line["message"])
        assert "allow_training_without_logprobs" in warning and off[-1]["metrics"].get("tokens_trained", 0) == 0, off[-1]

        def hits() -> float:
            r = sample(c, "offline", PROMPT, 32, 4, seed=7)
            return sum("B2" in ch["message"]["content"] for ch in r["choices"]) / 32

        before = hits()
        for k in range(8):
            group = offline_group([answers[(k + i) % len(answers)] for i in range(4)] + ["B2"])
            config = {
                "allow_training_without_logprobs": True,
                **({"gradient_steps": 2, "sampler_correction": "none"} if k == 0 else {}),
            }
            lines = step(c, "offline", [group], learning_rate=5e-2, **config)
            metrics = lines[-1]["metrics"]
            assert metrics["unsampled_trajectories_trained"] == 5 and metrics["tokens_trained"] > 0, metrics
            if k == 1:  # one gradient step: the tokens' sampler is the policy itself, so the ratio is exactly 1
                assert metrics["sampler_logprob_diff_mean"] == 0 and metrics["importance_ratio_mean"] == pytest.approx(1), metrics
        after = hits()
        print(f"offline plain messages: B2 in {before:.2f} -> {after:.2f} of 32 sampled answers")
        assert after >= before + 0.25, (before, after)


def test_equal_rewards_train_nothing_but_the_step_advances_and_says_why(trainer):
    with trainer.client() as c:
        register(c, "flat")
        groups = [sampled_group(c, "flat", [0.5] * 4), sampled_group(c, "flat", [1.0] * 4, seed=1)]
        lines = step(c, "flat", groups, learning_rate=1e-2)
    warning = next(line for line in lines if line["type"] == "warning")
    assert "all rewards in the group are equal" in warning["message"] and "2 groups" in warning["message"]
    result = lines[-1]
    assert result["step"] == 1
    assert result["metrics"]["groups_skipped_by_reason"] == {"equal_rewards": 2}
    assert "nothing to train" in result["metrics"]["nothing_trained"]


def test_missing_logprobs_are_reported_as_their_own_reason(trainer):
    with trainer.client() as c:
        register(c, "nolp")
        group = sampled_group(c, "nolp", [1, 0])
        del group[0]["messages_and_choices"][-1]["logprobs"]
        lines = step(c, "nolp", [group], learning_rate=1e-2)
    assert lines[-1]["metrics"]["groups_skipped_by_reason"] == {"missing_tokens": 1}
    assert "without token ids or logprobs" in lines[-1]["metrics"]["nothing_trained"]


def test_bad_training_requests_are_400_or_404(trainer):
    with trainer.client() as c:
        register(c, "strict")
        good = sampled_group(c, "strict", [1, 0])
        cases = [
            ({"groups": []}, 400, "groups"),
            ({"groups": [[]]}, 400, "group 0 is empty"),
            ({"groups": [good], "config": {"learning_rate": -1}}, 400, "learning_rate"),
            ({"groups": [good], "config": {"loss": "magic"}}, 400, "loss"),
            ({"groups": [[{**good[0], "reward": "high"}]]}, 400, "reward"),
        ]
        for body, status, text in cases:
            r = c.post("/v1/art/models/strict/train", json=body)
            assert r.status_code == status and text in r.json()["error"]["message"], (body, r.text)
        r = c.post(
            "/v1/art/models/strict/train",
            content=json.dumps({"groups": [[{**good[0], "reward": float("nan")}]]}),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400 and "reward" in r.json()["error"]["message"]
        r = c.post("/v1/art/models/ghost/train", json={"groups": [good]})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_registered"


def slow_step_body(c: httpx.Client, model: str) -> dict:
    """A step that takes long enough on the tiny model to race requests against it."""
    group = sampled_group(c, model, [1, 0, 0, 1, 0, 1, 0, 0])
    return {"groups": [group] * 40, "config": {"learning_rate": 1e-3, "micro_batch_size": 1, "gradient_steps": 40}}


@pytest.mark.parametrize("serve_previous", [False, True])
def test_requests_during_training_never_fail_and_wait_for_the_new_step_by_default(trainer, serve_previous):
    name = "racer-prev" if serve_previous else "racer"
    with trainer.client() as c:
        register(c, name)
        body = {**slow_step_body(c, name), "serve_previous_during_training": serve_previous}
        done = threading.Event()

        def train():
            with trainer.client() as t, t.stream("POST", f"/v1/art/models/{name}/train", json=body) as r:
                assert r.status_code == 200
                for _ in r.iter_lines():
                    pass
            done.set()

        thread = threading.Thread(target=train)
        thread.start()
        time.sleep(0.3)
        assert not done.is_set(), "the step finished before the race started; make it slower"
        during = sample(c, name, PROMPT, 1, 6, temperature=0)
        thread.join(60)
        after_new = sample(c, f"{name}@1", PROMPT, 1, 6, temperature=0)
        after_old = sample(c, f"{name}@0", PROMPT, 1, 6, temperature=0)
    lp = lambda r: [e["logprob"] for e in r["choices"][0]["logprobs"]["content"]]  # noqa: E731
    expected = after_old if serve_previous else after_new
    assert lp(during) == pytest.approx(lp(expected), abs=1e-5)


def test_history_log_and_delete_checkpoints_keep_latest_and_best(trainer):
    with trainer.client() as c:
        register(c, "keeper")
        for k, val_reward in enumerate([0.2, 0.9, 0.4]):
            r = c.post(
                "/v1/art/models/keeper/log", json={"split": "val", "groups": [sampled_group(c, "keeper", [val_reward] * 2)]}
            )
            assert r.status_code == 200 and r.json()["reward"] == pytest.approx(val_reward)
            step(c, "keeper", [sampled_group(c, "keeper", [1, 0], seed=k)], learning_rate=1e-3)
        history = c.get("/v1/art/models/keeper/history").json()["rows"]
        assert [(h["step"], h["split"]) for h in history] == [
            (0, "val"),
            (0, "train"),
            (1, "val"),
            (1, "train"),
            (2, "val"),
            (2, "train"),
        ]
        assert [x["step"] for x in c.get("/v1/art/models/keeper/checkpoints").json()["checkpoints"]] == [0, 1, 2, 3]
        r = c.post("/v1/art/models/keeper/delete_checkpoints", json={"keep_best_by": "val/reward"})
        assert r.json()["deleted"] == [0, 2] and r.json()["kept"] == [1, 3] and r.json()["best_step"] == 1
        assert [x["step"] for x in c.get("/v1/art/models/keeper/checkpoints").json()["checkpoints"]] == [1, 3]
        # A deleted step is gone from serving too; a kept older one still serves.
        assert c.post("/v1/chat/completions", json={"model": "keeper@2", "messages": PROMPT}).status_code == 404
        assert c.post("/v1/chat/completions", json={"model": "keeper@1", "messages": PROMPT, "max_tokens": 2}).status_code == 200


def test_every_choice_says_the_step_that_sampled_it_and_groups_log_at_an_earlier_step(trainer):
    """art_policy_step: the step a bare name resolved to (or the one named), in JSON and streamed
    answers; none for the base model. A pipeline logs an evaluation of step s after s + 1 exists."""

    def streamed_steps(c: httpx.Client, model: str) -> list[int | None]:
        with c.stream(
            "POST", "/v1/chat/completions", json={"model": model, "messages": PROMPT, "max_tokens": 3, "stream": True}
        ) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        return [ch.get("art_policy_step") for chunk in chunks for ch in chunk["choices"] if ch.get("finish_reason")]

    with trainer.client() as c:
        register(c, "policy-stepper")
        assert [ch["art_policy_step"] for ch in sample(c, "policy-stepper", PROMPT, 2, 3)["choices"]] == [0, 0]
        step(c, "policy-stepper", [sampled_group(c, "policy-stepper", [1, 0])], learning_rate=1e-3)
        assert [ch["art_policy_step"] for ch in sample(c, "policy-stepper", PROMPT, 1, 3)["choices"]] == [1]
        assert [ch["art_policy_step"] for ch in sample(c, "policy-stepper@0", PROMPT, 1, 3)["choices"]] == [0]
        assert streamed_steps(c, "policy-stepper") == [1] and streamed_steps(c, "policy-stepper@0") == [0]
        assert "art_policy_step" not in sample(c, "builtin:tiny", PROMPT, 1, 3)["choices"][0]
        r = c.post(
            "/v1/art/models/policy-stepper/log",
            json={"split": "val", "step": 0, "groups": [sampled_group(c, "policy-stepper@0", [1, 0])]},
        )
        assert r.status_code == 200 and r.json()["step"] == 0
        r = c.post(
            "/v1/art/models/policy-stepper/log",
            json={"split": "val", "step": 2, "groups": [sampled_group(c, "policy-stepper", [1, 0])]},
        )
        assert r.status_code == 409 and "step 2 is ahead of policy-stepper's current step 1" in r.json()["error"]["message"]


def test_checkpoint_files_are_downloadable(trainer):
    with trainer.client() as c:
        register(c, "files")
        r = c.get("/v1/art/models/files/checkpoints/0/files/adapter_config.json")
        assert r.status_code == 200 and r.json()["r"] == 8
        assert c.get("/v1/art/models/files/checkpoints/0/files/adapter_model.safetensors").content[:8]
        assert c.get("/v1/art/models/files/checkpoints/7/files/adapter_config.json").status_code == 404
        assert c.get("/v1/art/models/files/checkpoints/0/files/state.json").status_code == 404


# -- SFT -------------------------------------------------------------------------------------------

SFT_TASKS = [("Say hi.", "hi there"), ("Name a corner.", "A1"), ("Which way?", "left left")]


def test_sft_lowers_the_loss_teaches_the_answers_and_rl_continues_from_it(trainer):
    conversations = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in SFT_TASKS]
    with trainer.client() as c:
        register(c, "student")
        lines = step(
            c,
            "student",
            conversations,
            path="train_sft",
            learning_rate=2e-2,
            epochs=40,
            batch_size=3,
            schedule="cosine",
            warmup_ratio=0.1,
        )
        progress = [line for line in lines if line["type"] == "progress"]
        assert len(progress) == 40 and progress[-1]["loss"] < 0.2 * progress[0]["loss"]
        assert progress[0]["lr"] < progress[3]["lr"] and progress[-1]["lr"] < progress[10]["lr"]  # warm-up, then cosine
        assert lines[-1]["step"] == 1
        for q, a in SFT_TASKS:
            r = sample(c, "student", [{"role": "user", "content": q}], 1, 10, temperature=0)
            assert r["choices"][0]["message"]["content"] == a
        rl = step(c, "student", [sampled_group(c, "student", [1, 0])], learning_rate=1e-3)
        assert rl[-1]["step"] == 2
        assert [h["kind"] for h in c.get("/v1/art/models/student/history").json()["rows"]] == ["sft", "grpo"]


def test_sft_rejects_conversations_without_an_assistant_turn(trainer):
    with trainer.client() as c:
        register(c, "student2")
        r = c.post(
            "/v1/art/models/student2/train_sft", json={"conversations": [{"messages": [{"role": "user", "content": "x"}]}]}
        )
    assert r.status_code == 400 and "no assistant message" in r.json()["error"]["message"]
