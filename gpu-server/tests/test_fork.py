"""Forking a checkpoint (POST /v1/art/models/{name}/fork, issue 41), against the real server process:
the fork serves exactly the parent's adapter of that step and trains on from there as the parent
would have (the optimizer state comes along); the parent is untouched; bad forks are a 4xx that
change nothing; a kill -9 during a fork leaves the fork or the model as it was."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import ServerProcess, start_server
from probe import PROMPT, group_of, register, report, same, weights_of
from rl import sample, step

PROJECT = "reliable"  # probe.register's project
LR = 5e-2


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("fork"), "--base-model", "builtin:tiny")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def trunk(srv: ServerProcess) -> list[list[dict]]:
    """A parent trained two steps; returns the groups of its second step (sampled at step 1)."""
    with srv.client() as c:
        assert register(c, "trunk").status_code == 200
        step(c, "trunk", [group_of(c, "trunk", [1.0, 0.0, 0.5, 0.0])], learning_rate=LR)
        second = [group_of(c, "trunk", [0.0, 1.0, 0.0, 0.5], seed=1)]
        step(c, "trunk", second, learning_rate=LR)
    return second


def fork(c: httpx.Client, name: str, **body: Any) -> httpx.Response:
    return c.post(f"/v1/art/models/{name}/fork", json=body)


def greedy(c: httpx.Client, model: str) -> list[str]:
    prompts = [PROMPT, [{"role": "user", "content": "Pick a cell: A1, B2 or C3."}]]
    return [sample(c, model, p, 1, 8, seed=0, temperature=0)["choices"][0]["message"]["content"] for p in prompts]


def model_files(srv: ServerProcess, name: str) -> dict[str, bytes]:
    root = srv.data_dir / PROJECT / "models" / name
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_fork_serves_the_parents_step_and_trains_on_as_the_parent_did(srv, trunk):
    parent_before = model_files(srv, "trunk")
    with srv.client() as c:
        assert register(c, "branch").status_code == 200
        r = fork(c, "branch", from_model="trunk", not_after_step=1)
        assert r.status_code == 200, r.text
        info = r.json()
        assert (info["step"], info["inference_name"]) == (1, "branch@1"), info
        assert info["forked_from"] == {"project": PROJECT, "name": "trunk", "step": 1}
        assert c.get("/v1/art/models/branch").json()["forked_from"]["step"] == 1
        assert same(weights_of(srv, PROJECT, "branch", 1), weights_of(srv, PROJECT, "trunk", 1))
        assert greedy(c, "branch@1") == greedy(c, "trunk@1")
        assert greedy(c, "branch") == greedy(c, "trunk@1")  # the bare name is the fork's step
        rows = c.get("/v1/art/models/branch/history").json()["rows"]
        assert [r["trained_into_step"] for r in rows if r["split"] == "train"] == [1], rows
        assert "branch@0" not in [m["id"] for m in c.get("/v1/models").json()["data"]]
        # The parent's second step, taken by the fork: the same weights bit for bit, so the optimizer
        # state came along (a fresh Adam takes a different first step).
        result = step(c, "branch", trunk, learning_rate=LR)[-1]
        assert result["step"] == 2
        assert same(weights_of(srv, PROJECT, "branch", 2), weights_of(srv, PROJECT, "trunk", 2))
    assert model_files(srv, "trunk") == parent_before  # the parent is only read


def test_a_fork_without_a_step_takes_the_parents_latest_checkpoint(srv, trunk):
    with srv.client() as c:
        assert register(c, "latest").status_code == 200
        r = fork(c, "latest", from_model="trunk")
        assert r.status_code == 200 and r.json()["step"] == 2, r.text
        assert greedy(c, "latest") == greedy(c, "trunk@2")


CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Pick a cell: A1, B2 or C3." * n}, {"role": "assistant", "content": cell}]}
    for n, cell in ((1, "B2"), (3, "A1"), (2, "C3"), (5, "B2"))
]


def test_rl_on_a_fork_of_an_sft_step_starts_with_fresh_optimizer_moments(srv):
    """The fork takes the parent's optimizer state and the kind of step it came from, so the first
    RL step after a forked warm start resets it (service/optimizer_phase.py), as on the parent."""
    with srv.client() as c:
        assert register(c, "warm").status_code == 200
        step(c, "warm", CONVERSATIONS, path="train_sft", learning_rate=1e-2, epochs=1, batch_size=4)
        assert register(c, "from-warm").status_code == 200
        assert fork(c, "from-warm", from_model="warm").status_code == 200
        result = step(c, "from-warm", [group_of(c, "from-warm", [1.0, 0.0, 0.5, 0.0])], learning_rate=LR)[-1]
        assert result["metrics"].get("optimizer_reset") is True, result["metrics"]


@pytest.mark.parametrize("path", ["train", "train_sft"])
def test_a_token_budget_cuts_the_passes_and_trains_exactly_what_one_row_per_pass_trains(srv, trunk, path):
    """micro_batch_tokens bounds a pass's memory (trainer/micro_batches.py). A budget of 1 token
    leaves one row per pass: the same passes, in the same order, as micro_batch_size 1, so the same
    weights bit for bit from the same fork; without the budget the rows would share one pass and
    the sums their order."""
    data, config = (
        (trunk, {"learning_rate": LR})
        if path == "train"
        else (CONVERSATIONS, {"learning_rate": LR, "epochs": 1, "batch_size": 4})
    )
    with srv.client() as c:
        for name in (f"rows-{path}", f"tokens-{path}", f"whole-{path}"):
            assert register(c, name).status_code == 200
            assert fork(c, name, from_model="trunk", not_after_step=1).status_code == 200
        step(c, f"rows-{path}", data, path=path, micro_batch_size=1, **config)
        step(c, f"tokens-{path}", data, path=path, micro_batch_tokens=1, **config)
        step(c, f"whole-{path}", data, path=path, **config)
    rows, tokens, whole = (weights_of(srv, PROJECT, f"{kind}-{path}", 2) for kind in ("rows", "tokens", "whole"))
    assert same(rows, tokens)
    assert not same(rows, whole)  # one pass of every row sums in another order: the test can tell


def test_bad_forks_are_4xx_that_say_what_to_do_and_change_nothing(srv, trunk):
    with srv.client() as c:
        assert register(c, "target").status_code == 200
        assert register(c, "narrow", lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj"]}).status_code == 200
        other = srv.data_dir / PROJECT / "models" / "elsewhere"  # a model another server trained on another base model
        shutil.copytree(srv.data_dir / PROJECT / "models" / "trunk", other, dirs_exist_ok=True)
        meta = json.loads((other / "model.json").read_text())
        (other / "model.json").write_text(json.dumps({**meta, "name": "elsewhere", "base_model": "builtin:other"}))
        before = model_files(srv, "target")
        cases = {
            "unknown parent": ("target", {"from_model": "nobody"}, 404, "no model reliable/nobody"),
            "unknown project": ("target", {"from_model": "trunk", "from_project": "nowhere"}, 404, "no model nowhere/trunk"),
            "itself": ("target", {"from_model": "target"}, 400, "cannot be forked from itself"),
            "another base model": ("target", {"from_model": "elsewhere"}, 409, "needs the same base model"),
            "another LoRA config": ("narrow", {"from_model": "trunk"}, 409, "register the fork with the parent's LoRA config"),
            "negative step": ("target", {"from_model": "trunk", "not_after_step": -1}, 400, "not_after_step"),
            "a name that escapes": ("target", {"from_model": "../trunk"}, 400, "invalid model name"),
            "an unknown field": ("target", {"from_model": "trunk", "step": 1}, 400, "step"),
            "unregistered target": ("ghost", {"from_model": "trunk"}, 404, "not registered"),
        }
        for case, (name, body, status, says) in cases.items():
            r = fork(c, name, **body)
            report(f"fork: {case}", [r.status_code], wrong="" if says in r.text else r.text[:200])
            assert r.status_code == status and says in r.text, (case, r.status_code, r.text)
        assert model_files(srv, "target") == before
        # Step 0 survives only a deletion that keeps the latest and best: then no step is at or before 1.
        assert register(c, "pruned").status_code == 200
        step(c, "pruned", [group_of(c, "pruned", [1.0, 0.0])], learning_rate=LR)
        step(c, "pruned", [group_of(c, "pruned", [1.0, 0.0], seed=2)], learning_rate=LR)
        assert c.post("/v1/art/models/pruned/delete_checkpoints", json={}).json()["kept"] == [2]
        r = fork(c, "target", from_model="pruned", not_after_step=1)
        assert r.status_code == 404 and "no checkpoint at or before step 1 (its steps: 2)" in r.text, r.text
        # A model that has trained keeps its run unless the fork is asked to overwrite it.
        r = fork(c, "pruned", from_model="trunk", not_after_step=1)
        assert r.status_code == 409 and "overwrite: true" in r.text, r.text
        assert c.get("/v1/art/models/pruned").json()["step"] == 2
        r = fork(c, "pruned", from_model="trunk", not_after_step=1, overwrite=True)
        assert r.status_code == 200 and r.json()["step"] == 1, r.text
        files = model_files(srv, "pruned")
        assert {k.split("/")[1] for k in files if k.startswith("checkpoints/")} == {"0001"}, sorted(files)
        assert not [k for k in files if k.startswith("trajectories/")], sorted(files)  # the replaced run's
        rows = c.get("/v1/art/models/pruned/history").json()["rows"]
        assert max(r.get("trained_into_step", 0) for r in rows) == 1, rows
        r = c.post("/v1/chat/completions", json={"model": "pruned@2", "messages": PROMPT, "max_tokens": 2})
        assert r.status_code == 404, r.text  # the replaced run's steps are gone


@pytest.mark.parametrize(
    ("fault", "forked"), [("exit_during_fork", False), ("exit_after_fork_commit", True)], ids=["before commit", "after commit"]
)
def test_a_kill_during_a_fork_leaves_the_fork_or_the_model_as_it_was(tmp_path_factory, fault, forked):
    data = tmp_path_factory.mktemp("fork-crash")
    first = start_server(data, "--base-model", "builtin:tiny", env={"ART_FAULT": fault})
    with first.client() as c:
        assert register(c, "parent").status_code == 200
        step(c, "parent", [group_of(c, "parent", [1.0, 0.0, 0.5, 0.0])], learning_rate=LR)
        assert register(c, "child").status_code == 200
        with pytest.raises(httpx.HTTPError):
            fork(c, "child", from_model="parent")
    first.process.wait(timeout=30)
    second = start_server(data, "--base-model", "builtin:tiny")
    try:
        with second.client() as c:
            info = register(c, "child").json()
            root = data / PROJECT / "models" / "child"
            leftovers = [p.name for p in root.iterdir() if p.name.startswith(".fork")]
            steps = sorted(p.name for p in (root / "checkpoints").iterdir())
            expected = (1, ["0001"]) if forked else (0, ["0000"])
            ok = (info["step"], steps) == expected and not leftovers and ("forked_from" in info) == forked
            if forked:
                assert register(c, "parent").status_code == 200
                ok = ok and same(weights_of(second, PROJECT, "child", 1), weights_of(second, PROJECT, "parent", 1))
                ok = ok and greedy(c, "child") == greedy(c, "parent@1")
            report(f"kill -9 during a fork, {'after' if forked else 'before'} its commit", [200], corrupted=not ok)
            assert ok, (info, steps, leftovers)
    finally:
        second.stop()
