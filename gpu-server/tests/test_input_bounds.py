"""Input that must not give a 5xx or garbage (issue 21): sampling numbers at the edge of float32, JSON
nested past what can be written back, adapters that do not fit the base model, names that collide
with trained models, other base models, other folders or the server's own files."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ServerProcess, start_server
from probe import PROMPT, attempt, group_of, register, report, status_of, train_status


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("bounds"), "--base-model", "builtin:tiny")
    yield s
    s.stop()


def chat(c: httpx.Client, **fields) -> httpx.Response:
    return c.post(
        "/v1/chat/completions",
        json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 6, "seed": 7, "logprobs": True, **fields},
    )


def sampled(r: httpx.Response) -> tuple[list[int], list]:
    choice = r.json()["choices"][0]
    return choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]


def finite(logprobs: list) -> bool:
    return all(isinstance(x, float) and math.isfinite(x) for x in logprobs)


def test_temperatures_and_top_p_too_small_for_float32_sample_greedily_not_garbage(srv):
    cases = {
        "temperature 1e-38": {"temperature": 1e-38},
        "temperature 1e-300": {"temperature": 1e-300},
        "temperature 5e-6": {"temperature": 5e-6},
        "top_p 1e-45": {"top_p": 1e-45},
        "top_p 1e-300": {"top_p": 1e-300},
        "temperature 0.7, top_p 1e-300": {"temperature": 0.7, "top_p": 1e-300},
    }
    with srv.client() as c:
        greedy, _ = sampled(chat(c, temperature=0))
        answers = {case: chat(c, **fields) for case, fields in cases.items()}
    wrong = [case for case, r in answers.items() if r.status_code != 200 or not finite(sampled(r)[1]) or sampled(r)[0] != greedy]
    report(
        "temperature 1e-38 / 1e-300 / 5e-6, top_p 1e-45 / 1e-300",
        [r.status_code for r in answers.values()],
        wrong=f"garbage (not the greedy tokens, or null logprobs): {', '.join(wrong)}" if wrong else "",
    )
    assert not wrong, {case: answers[case].text[:300] for case in wrong}


def deep(levels: int) -> dict:
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return value  # type: ignore[return-value]


def test_json_nested_past_the_bound_is_a_400_and_within_it_is_taken(srv):
    with srv.client() as c:
        assert register(c, "nested").status_code == 200
        group = group_of(c, "nested", [1, 0])

        def requests(levels: int) -> dict[str, httpx.Response | int]:
            with_meta = [{**t, "metadata": {"x": deep(levels)}} for t in group]
            tool = {"type": "function", "function": {"name": "f", "parameters": deep(levels)}}
            sft = {
                "conversations": [
                    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "tools": [tool]}
                ],
                "config": {"epochs": 1, "learning_rate": 1e-9},
            }
            return {
                "train metadata": attempt(lambda: train_status(c, "nested", [with_meta], {"learning_rate": 1e-9})[0]),
                "log metadata": attempt(lambda: c.post("/v1/art/models/nested/log", json={"groups": [with_meta]})),
                "train_sft tool parameters": attempt(lambda: c.post("/v1/art/models/nested/train_sft", json=sft)),
                "chat message field": attempt(
                    lambda: c.post(
                        "/v1/chat/completions",
                        json={"model": "nested", "max_tokens": 2, "messages": [{**PROMPT[0], "extra": deep(levels)}]},
                    )
                ),
            }

        shallow = {k: status_of(v) for k, v in requests(60).items()}
        too_deep = {k: v for k, v in requests(300).items()}
    statuses = {k: status_of(v) for k, v in too_deep.items()}
    report("metadata / tool parameters / a message field nested 300 deep", list(statuses.values()))
    assert set(shallow.values()) == {200}, shallow
    assert set(statuses.values()) == {400}, statuses
    for r in too_deep.values():
        if not isinstance(r, int):
            assert "deep" in r.json()["error"]["message"], r.text


def _adapter(srv: ServerProcess, tmp: Path, name: str, config_change: dict | None = None, weights=None) -> Path:
    """A copy of checkpoint 1 of model `fit`, its config and weights changed."""
    source = srv.data_dir / "reliable" / "models" / "fit" / "checkpoints" / "0001"
    folder = tmp / name
    shutil.copytree(source, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **(config_change or {})}))
    if weights is not None:
        save_file(weights(load_file(str(folder / "adapter_model.safetensors"))), str(folder / "adapter_model.safetensors"))
    return folder


def test_adapters_that_do_not_fit_the_base_model_are_refused_with_the_reason(srv, tmp_path):
    with srv.client() as c:
        assert register(c, "fit").status_code == 200
        assert train_status(c, "fit", [group_of(c, "fit", [1, 0, 0.3, 0.8])], {"learning_rate": 1e-2})[0] == 200
        wider = lambda w: {k: torch.randn(*[256 if d == 64 else d for d in v.shape]) * 0.01 for k, v in w.items()}  # noqa: E731
        renamed = lambda w: {k.replace(".q_proj.", ".qkv_proj."): v for k, v in w.items()}  # noqa: E731
        folders = {
            "an unknown target module": _adapter(srv, tmp_path, "unknown", {"target_modules": ["qkv_proj"]}, renamed),
            "another hidden size (256, the base has 64)": _adapter(srv, tmp_path, "wider", None, wider),
            "r in the config differing from the tensors": _adapter(srv, tmp_path, "rank", {"r": 4}),
            "lora_alpha 1e30": _adapter(srv, tmp_path, "alpha", {"lora_alpha": 1e30}),
            "lora_alpha NaN": _adapter(srv, tmp_path, "nan", {"lora_alpha": float("nan")}),
        }
        answers = {
            case: attempt(lambda: c.post("/v1/load_lora_adapter", json={"lora_name": f"misfit{i}@1", "lora_path": str(path)}))
            for i, (case, path) in enumerate(folders.items())
        }
        # Whatever was accepted is served: it must give finite logprobs, not garbage.
        served = {
            case: chat(c, model=f"misfit{i}@1", temperature=0)
            for i, case in enumerate(folders)
            if status_of(answers[case]) == 200
        }
        base_after = chat(c, temperature=0)
        good = c.post("/v1/load_lora_adapter", json={"lora_name": "good@1", "lora_path": str(_adapter(srv, tmp_path, "good"))})
        good_served = chat(c, model="good@1", temperature=0)
    for case, r in answers.items():
        garbage = case in served and not (served[case].status_code == 200 and finite(sampled(served[case])[1]))
        report(f"load_lora_adapter: {case}", [status_of(r)], wrong="serves garbage (null logprobs)" if garbage else "")
    assert {case: status_of(r) for case, r in answers.items()} == dict.fromkeys(folders, 400), {
        case: getattr(r, "text", r) for case, r in answers.items()
    }
    assert all(r.json()["error"]["message"] for r in answers.values())
    assert base_after.status_code == 200 and finite(sampled(base_after)[1])
    assert good.status_code == 200 and good_served.status_code == 200 and finite(sampled(good_served)[1])


def test_names_of_trained_models_are_theirs_alone(srv, tmp_path):
    with srv.client() as c:
        assert register(c, "own").status_code == 200
        assert train_status(c, "own", [group_of(c, "own", [1, 0])], {"learning_rate": 1e-3})[0] == 200
        other = tmp_path / "other"
        shutil.copytree(srv.data_dir / "reliable" / "models" / "own" / "checkpoints" / "0000", other)
        takeover = c.post("/v1/load_lora_adapter", json={"lora_name": "own@999", "lora_path": str(other)})
        bare = next(m for m in c.get("/v1/models").json()["data"] if m["id"] == "own")["parent"]
        assert train_status(c, "own", [group_of(c, "own", [1, 0], seed=1)], {"learning_rate": 1e-3})[0] == 200
        bare_after = next(m for m in c.get("/v1/models").json()["data"] if m["id"] == "own")["parent"]
        # The other way round: a name held by loaded adapters cannot become a trained model's.
        assert c.post("/v1/load_lora_adapter", json={"lora_name": "ext@1", "lora_path": str(other)}).status_code == 200
        claimed = register(c, "ext")
        # Another base model under a registered name.
        rebased = register(c, "own", base_model="builtin:small")
    report(
        "load_lora_adapter own@999 from another folder over trained model own",
        [takeover.status_code],
        wrong=f"the bare name serves {bare_after}" if bare_after != "own@2" else "",
    )
    report("register a name held by loaded adapters", [claimed.status_code])
    report("re-register a model under another base model (running server)", [rebased.status_code])
    assert takeover.status_code == 409 and "trained on this server" in takeover.json()["error"]["message"]
    assert (bare, bare_after) == ("own@1", "own@2")
    assert claimed.status_code == 409, claimed.text
    assert rebased.status_code == 409 and "builtin:small" in rebased.json()["error"]["message"], rebased.text


def training_slots(srv: ServerProcess) -> list[str]:
    with srv.client() as c:  # a connection of its own: a 5xx before may have closed the other one
        return c.get("/v1/engine/stats").json()["training_slots"]


def test_names_with_a_newline_and_reserved_project_names_are_refused_and_leave_nothing(srv):
    with srv.client() as c:
        assert register(c, "named").status_code == 200
        slots_before = training_slots(srv)
        one_val = group_of(c, "named", [1])
        newline = {
            "model name 'nl\\n'": attempt(lambda: register(c, "nl\n")),
            "project 'rel2\\n'": attempt(lambda: register(c, "nl2", project="rel2\n")),
            "split 'val\\n'": attempt(lambda: c.post("/v1/art/models/named/log", json={"split": "val\n", "groups": [one_val]})),
            "adapter 'nl\\n@1'": attempt(
                lambda: c.post("/v1/load_lora_adapter", json={"lora_name": "nl\n@1", "lora_path": str(srv.data_dir)})
            ),
            "chat model 'named@0\\n'": attempt(
                lambda: c.post("/v1/chat/completions", json={"model": "named@0\n", "messages": PROMPT})
            ),
        }
        reserved = {
            name: attempt(lambda: register(c, "r", project=name))
            for name in ("server.json", "server.lock", "server-identity.json")
        }
        (srv.data_dir / "blocked").write_text("a file where the project's folder would go")
        storage = attempt(lambda: register(c, "r", project="blocked"))
    slots_after = training_slots(srv)
    on_disk = [str(p) for p in srv.data_dir.rglob("*") if "\n" in p.name]
    report(
        "names ending in a newline (model, project, split, adapter, chat model)",
        [status_of(r) for r in newline.values()],
        wrong=f"folders with a newline: {len(on_disk)}" if on_disk else "",
    )
    report("project named server.json / server.lock / server-identity.json", [status_of(r) for r in reserved.values()])
    report(
        "a registration that fails on storage leaves no LoRA slot",
        [status_of(storage)],
        injected=status_of(storage) == 507,
        wrong=f"LoRA slots {slots_before} -> {slots_after}" if slots_after != slots_before else "",
    )
    assert {k: status_of(r) for k, r in newline.items()} == {**dict.fromkeys(newline, 400), "chat model 'named@0\\n'": 404}
    assert not on_disk, on_disk
    assert all(status_of(r) == 400 and "reserved" in r.json()["error"]["message"] for r in reserved.values()), {
        k: getattr(r, "text", r) for k, r in reserved.items()
    }
    assert status_of(storage) == 507 and slots_after == slots_before, (
        getattr(storage, "text", storage),
        slots_before,
        slots_after,
    )
