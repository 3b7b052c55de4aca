"""Reliability: the cases a hostile or careless client found (issue 14), each a named regression
against the real server process. A training step is a transaction (a failed or refused step
leaves the adapter and its optimizer bit for bit as a clean run has them), bad input is a 4xx,
requests cannot stall the server, concurrent use gives no 500, and a step's history survives a
crash right after its checkpoint. Every case also appends a row to the probe table (probe.py).
The second round (issue 21) is in test_durability.py, test_untrusted_clients.py and
test_input_bounds.py.

Over 400 lines: one module per story (issue 14's cases against one server); its cases share the probe table and the server fixture.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import ServerProcess, start_server
from probe import (
    PROMPT,
    TIMEOUT,
    attempt,
    finite,
    group_of,
    health_latencies,
    register,
    report,
    same,
    status_of,
    train_status,
    weights_of,
)
from rl import sample


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("reliable"), "--base-model", "builtin:tiny")
    yield s
    s.stop()


# -- weights are never corrupted -----------------------------------------------------------------


def _with_choice(good: list[dict], **fields: Any) -> list[list[dict]]:
    """The group with its first trajectory's sampled choice changed."""
    choice = good[0]["messages_and_choices"][-1]
    return [[{**good[0], "messages_and_choices": [*PROMPT, {**choice, **fields}]}, good[1]]]


BAD_STEPS: dict[str, Any] = {  # case -> (good group -> request body bytes)
    "logprob -1e30": lambda g: {"groups": _with_choice(g, logprobs=[-1e30] * len(g[0]["messages_and_choices"][-1]["token_ids"]))},
    "logprob above 0": lambda g: {"groups": _with_choice(g, logprobs=[5.0] * len(g[0]["messages_and_choices"][-1]["token_ids"]))},
    "logprob -Infinity": lambda g: {
        "groups": _with_choice(g, logprobs=["@-INF@"] * len(g[0]["messages_and_choices"][-1]["token_ids"]))
    },
    "kl_coef 1e308": lambda g: {"groups": [g], "config": {"kl_coef": 1e308}},
    "kl_coef Infinity": lambda g: {"groups": [g], "config": {"kl_coef": "@INF@"}},
    "eps_high 1e308": lambda g: {"groups": [g], "config": {"eps_high": 1e308}},
    "reward 1e308": lambda g: {"groups": [[{**g[0], "reward": 1e308}, g[1]]]},
    "token id out of vocabulary": lambda g: {
        "groups": _with_choice(g, token_ids=[10**9] * len(g[0]["messages_and_choices"][-1]["token_ids"]))
    },
    "negative token id": lambda g: {"groups": _with_choice(g, prompt_token_ids=[-5, 3])},
}


@pytest.mark.parametrize("case", list(BAD_STEPS))
def test_non_finite_or_impossible_numbers_are_refused_before_the_weights_are_touched(srv, case):
    name = "poison" + str(list(BAD_STEPS).index(case))
    with srv.client() as c:
        assert register(c, name).status_code == 200
        good = group_of(c, name, [1, 0])
        # JSON's own infinities (Python's json and pydantic read them) are written as raw text.
        raw = json.dumps(BAD_STEPS[case](good)).replace('"@-INF@"', "-Infinity").replace('"@INF@"', "Infinity").encode()
        status, lines = train_status(c, name, None, raw=raw)
        step_after = c.get(f"/v1/art/models/{name}").json()["step"]
        # A step that went through shows in its checkpoint whether the weights survived it.
        corrupted = status == 200 and not finite(weights_of(srv, "reliable", name, 1))
        report(case, [status], corrupted=corrupted)
        assert 400 <= status < 500 and step_after == 0, (case, lines)
        valid, _ = train_status(c, name, [good], {"learning_rate": 1e-2})
    assert valid == 200 and finite(weights_of(srv, "reliable", name, 1))


def _clean_and_failed(tmp_path_factory, fault: str, bad_first: bool) -> tuple[dict, dict, list[int]]:
    """Trains the same group as step 1 on a clean server and on one where a step failed first
    (`fault` injected, or a refused out-of-vocabulary step); returns both step-1 weights."""
    clean = start_server(tmp_path_factory.mktemp("clean"), "--base-model", "builtin:tiny")
    try:
        with clean.client() as c:
            assert register(c, "tx").status_code == 200
            groups = [group_of(c, "tx", [1, 0, 0.5, 0.2], seed=3), group_of(c, "tx", [0, 1, 0.3, 0.9], seed=4)]
            status, _ = train_status(c, "tx", groups, {"learning_rate": 1e-2, "gradient_steps": 2, "micro_batch_size": 2})
            assert status == 200
        reference = weights_of(clean, "reliable", "tx", 1)
    finally:
        clean.stop()
    failing = start_server(
        tmp_path_factory.mktemp("failing"), "--base-model", "builtin:tiny", env={"ART_FAULT": fault} if fault else None
    )
    statuses = []
    try:
        with failing.client() as c:
            assert register(c, "tx").status_code == 200
            config = {"learning_rate": 1e-2, "gradient_steps": 2, "micro_batch_size": 2}
            if bad_first:
                oov = json.loads(json.dumps(groups))
                oov[1][0]["messages_and_choices"][-1]["token_ids"][0] = 10**6
                statuses.append(train_status(c, "tx", oov, config)[0])
            else:
                statuses.append(train_status(c, "tx", groups, config)[0])
            assert c.get("/v1/art/models/tx").json()["step"] == 0
            status, _ = train_status(c, "tx", groups, config)
            statuses.append(status)
            assert status == 200
        return reference, weights_of(failing, "reliable", "tx", 1), statuses
    finally:
        failing.stop()


@pytest.mark.parametrize(
    "case,fault,bad_first",
    [
        ("out-of-vocabulary step, then a valid one", "", True),
        ("failure in gradient step 2 (after an optimizer step), then a valid one", "gradient_step:2", False),
        ("failed checkpoint save (read-only disk), then a valid one", "save", False),
    ],
)
def test_a_failed_step_leaves_the_adapter_and_optimizer_bit_for_bit_as_before(tmp_path_factory, case, fault, bad_first):
    reference, after_failure, statuses = _clean_and_failed(tmp_path_factory, fault, bad_first)
    identical = same(reference, after_failure)
    report(case, statuses, corrupted=not identical, injected=bool(fault))
    assert statuses[0] in (400, 500, 507) and statuses[1] == 200, statuses
    assert identical, "the step after a failed one differs from a clean run's"


def test_a_crash_right_after_the_checkpoint_keeps_its_history_row_and_trajectories(tmp_path_factory):
    data = tmp_path_factory.mktemp("crash")
    first = start_server(data, "--base-model", "builtin:tiny", env={"ART_FAULT": "exit_after_publish"})
    with first.client() as c:
        assert register(c, "durable").status_code == 200
        group = group_of(c, "durable", [1, 0])
        with pytest.raises(httpx.HTTPError):
            train_status(c, "durable", [group], {"learning_rate": 1e-2})
    first.process.wait(timeout=30)
    second = start_server(data, "--base-model", "builtin:tiny")
    try:
        with second.client() as c:
            assert register(c, "durable").json()["step"] == 1
            rows = c.get("/v1/art/models/durable/history").json()["rows"]
        model_dir = data / "reliable" / "models" / "durable"
        kept = [r for r in rows if r.get("trained_into_step") == 1] and (
            model_dir / "trajectories" / "train" / "0000.jsonl"
        ).exists()
        report("kill right after a checkpoint's rename", [200], corrupted=not kept)
        assert kept, rows
    finally:
        second.stop()


# -- work has bounds and owners ------------------------------------------------------------------


def test_a_training_request_whose_client_leaves_is_cancelled_and_rolled_back(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("leaver"), "--base-model", "builtin:tiny")
    try:
        _leave_a_long_step(srv)
    finally:
        srv.stop()


def _leave_a_long_step(srv: ServerProcess) -> None:
    conversation = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}
    with srv.client() as c:
        assert register(c, "leaver").status_code == 200
        with c.stream(
            "POST", "/v1/art/models/leaver/train_sft", json={"conversations": [conversation], "config": {"epochs": 10**9}}
        ) as r:
            too_many = r.status_code  # 200: accepted, and training a billion epochs; leaving closes the request
            if too_many != 200:
                r.read()
        report("train_sft with epochs 1e9", [too_many], hang=too_many == 200)
        before = weights_of(srv, "reliable", "leaver", 0)
        body = {"conversations": [conversation] * 8, "config": {"epochs": 1000, "batch_size": 1, "learning_rate": 1e-3}}
        with c.stream("POST", "/v1/art/models/leaver/train_sft", json=body) as r:
            for line in r.iter_lines():
                if '"progress"' in line:
                    break  # training is running: leave
        deadline = time.time() + 20
        left = time.perf_counter()
        while c.get("/v1/art/models/leaver").json()["training"]:
            if time.time() > deadline:
                report("a long step whose client disconnects", [200], hang=True)
                raise AssertionError("still training 20 s after the client left")
            time.sleep(0.2)
        print(f"client left a long step: training stopped {time.perf_counter() - left:.2f} s later")
        moved = c.get("/v1/art/models/leaver").json()["step"] != 0
        started = time.perf_counter()
        sample(c, "leaver", PROMPT, 1, 4, seed=1)
        latency = time.perf_counter() - started
        # Rolled back: a step with a negligible learning rate, saved as step 1, holds the weights the
        # adapter has in memory now, which must be step 0's (a half step would show as a difference).
        status = attempt(lambda: train_status(c, "leaver", [group_of(c, "leaver", [1, 0])], {"learning_rate": 1e-9})[0])
    after = weights_of(srv, "reliable", "leaver", 1) if status == 200 else before
    changed = moved or max(float((after[k] - before[k]).abs().max()) for k in before) > 1e-6
    report("a long step whose client disconnects", [status], hang=latency > 2 or status == TIMEOUT, corrupted=changed)
    assert too_many == 400
    assert status == 200 and latency < 2 and not changed


def test_a_huge_prompt_is_refused_fast_without_stalling_other_requests_or_the_cache(srv):
    huge = "word " * 2_000_000  # 10 MB
    statuses = []
    with health_latencies(srv.url) as timings, srv.client(timeout=60) as c:
        cache_before = c.get("/v1/engine/stats").json().get("prompt_cache", {}).get("bytes")
        for size in (4_000_000, 4_000_000, 4_000_000, len(huge)):
            statuses.append(
                status_of(
                    attempt(
                        lambda: c.post(
                            "/v1/chat/completions",
                            json={"model": "builtin:tiny", "messages": [{"role": "user", "content": huge[:size]}]},
                        )
                    )
                )
            )
        cache_after = c.get("/v1/engine/stats").json().get("prompt_cache", {}).get("bytes")
    worst = max(timings) if timings else 0.0
    report(
        "10 MB prompt, /health meanwhile; rejected prompts cached",
        statuses,
        hang=worst > 1.0,
        wrong="" if cache_after is not None and cache_after <= cache_before else "refused prompts kept in the cache",
    )
    assert all(s == 400 for s in statuses), statuses
    assert worst < 1.0, f"/health took {worst:.2f} s during a huge prompt"
    assert cache_after == cache_before


# -- concurrency without 500s --------------------------------------------------------------------


def test_requests_to_a_step_being_unloaded_finish(srv):
    with srv.client() as c:
        assert register(c, "busy").status_code == 200
        statuses: list[int] = []

        def ask(i: int) -> int:
            with srv.client(timeout=120) as cc:
                return status_of(
                    attempt(
                        lambda: cc.post(
                            "/v1/chat/completions",
                            json={"model": "busy@0", "messages": PROMPT, "max_tokens": 64, "n": 4, "seed": i},
                        )
                    )
                )

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(ask, i) for i in range(16)]
            time.sleep(0.05)
            # Steps with equal rewards train nothing but each makes a step: 5 of them push step 0 out.
            for k in range(5):
                status, _ = train_status(c, "busy", [group_of(c, "busy", [0.5, 0.5], seed=k)])
                statuses.append(status)
            unloaded = c.post("/v1/unload_lora_adapter", json={"lora_name": "busy@1"})
            statuses.append(unloaded.status_code)
            statuses += [f.result() for f in futures]
    report("16 requests in flight while their step is pushed out and unloaded", statuses)
    assert all(s < 500 for s in statuses), statuses


def test_concurrent_first_registrations_of_one_name_all_succeed(srv):
    with concurrent.futures.ThreadPoolExecutor(6) as pool:

        def reg(_: int) -> tuple[int, int | None]:
            with srv.client() as c:
                r = register(c, "racer")
                return r.status_code, r.json().get("step")

        results = list(pool.map(reg, range(6)))
    report("6 concurrent first registrations of one name", [s for s, _ in results])
    assert results == [(200, 0)] * 6


# -- every bad input is a clear 4xx --------------------------------------------------------------


def test_bad_inputs_that_were_500s_are_4xx(srv, tmp_path):
    with srv.client() as c:
        assert register(c, "fourxx").status_code == 200
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "adapter_config.json").write_text("{not json")
        truncated = tmp_path / "truncated"
        truncated.mkdir()
        ckpt0 = srv.data_dir / "reliable" / "models" / "fourxx" / "checkpoints" / "0000"
        (truncated / "adapter_config.json").write_text((ckpt0 / "adapter_config.json").read_text())
        (truncated / "adapter_model.safetensors").write_bytes((ckpt0 / "adapter_model.safetensors").read_bytes()[:500])
        requests = {
            "65-bit integer in a message": lambda: c.post(
                "/v1/chat/completions",
                json={"model": "fourxx", "messages": [{"role": "user", "content": "hi", "extra": 2**65}], "max_tokens": 2},
            ),
            "step suffix '²' on chat": lambda: c.post("/v1/chat/completions", json={"model": "fourxx@²", "messages": PROMPT}),
            "step suffix of 5000 digits": lambda: c.post(
                "/v1/chat/completions", json={"model": "fourxx@" + "9" * 5000, "messages": PROMPT}
            ),
            "load adapter 'x@²'": lambda: c.post("/v1/load_lora_adapter", json={"lora_name": "x@²", "lora_path": str(ckpt0)}),
            "unload adapter 'x@²'": lambda: c.post("/v1/unload_lora_adapter", json={"lora_name": "x@²"}),
            "load adapter, a too-long path": lambda: c.post(
                "/v1/load_lora_adapter", json={"lora_name": "x@1", "lora_path": "/" + "a" * 4000}
            ),
            "load adapter, truncated safetensors": lambda: c.post(
                "/v1/load_lora_adapter", json={"lora_name": "x@1", "lora_path": str(truncated)}
            ),
            "load adapter, broken adapter_config.json": lambda: c.post(
                "/v1/load_lora_adapter", json={"lora_name": "x@2", "lora_path": str(broken)}
            ),
            "register with target_modules ['nonexistent']": lambda: register(
                c, "badlora", lora={"target_modules": ["nonexistent"]}
            ),
            "seed of 2**70": lambda: c.post("/v1/chat/completions", json={"model": "fourxx", "messages": PROMPT, "seed": 2**70}),
        }
        cases = {case: attempt(request) for case, request in requests.items()}
        served_after = status_of(
            attempt(lambda: c.post("/v1/chat/completions", json={"model": "fourxx", "messages": PROMPT, "max_tokens": 2}))
        )
    for case, r in cases.items():
        report(case, [status_of(r)])
    assert status_of(cases["65-bit integer in a message"]) == 200
    for case, r in cases.items():
        assert 0 < status_of(r) < 500, (case, status_of(r))
        assert r.json()["error"]["message"] if r.status_code >= 400 else True
    assert served_after == 200, "the server serves normally after the bad adapters"


def test_register_without_a_loaded_base_refuses_paths_that_are_not_models(tmp_path_factory):
    bare = start_server(tmp_path_factory.mktemp("bare"))
    try:
        with bare.client() as c:
            statuses = {
                name: status_of(attempt(lambda: register(c, "m", base_model=name))) for name in ["/", "/etc", "~", "x" * 10_000]
            }
    finally:
        bare.stop()
    report("register base_model '/', '/etc', '~', 10,000 characters", list(statuses.values()))
    assert all(400 <= s < 500 for s in statuses.values()), statuses


# -- provenance ----------------------------------------------------------------------------------


def test_choices_from_another_base_model_are_refused_and_from_another_server_warned(srv, tmp_path_factory):
    other_base = start_server(tmp_path_factory.mktemp("small"), "--base-model", "builtin:small")
    twin = start_server(tmp_path_factory.mktemp("twin"), "--base-model", "builtin:tiny")
    try:
        with other_base.client() as c:
            foreign = group_of(c, "builtin:small", [1, 0])
        with twin.client() as c:
            from_twin = group_of(c, "builtin:tiny", [1, 0])
    finally:
        other_base.stop()
        twin.stop()
    with srv.client() as c:
        assert register(c, "prov").status_code == 200
        refused, refused_lines = train_status(c, "prov", [foreign])
        report("choices sampled from another base model", [refused])
        tampered = group_of(c, "prov", [1, 0])
        tampered[0]["messages_and_choices"][-1]["logprobs"][0] -= 0.5
        altered, altered_lines = train_status(c, "prov", [tampered])
        accepted, lines = train_status(c, "prov", [from_twin], {"learning_rate": 1e-3})
        untagged = group_of(c, "prov", [1, 0])
        for t in untagged:
            del t["messages_and_choices"][-1]["art_provenance"]
        accepted_untagged, untagged_lines = train_status(c, "prov", [untagged], {"learning_rate": 1e-3})
    assert refused == 400 and "another base model" in refused_lines[0]["error"]["message"]
    assert altered == 400 and "differ from what this server sampled" in altered_lines[0]["error"]["message"]
    assert accepted == 200 and any(line["type"] == "warning" and "another server" in line["message"] for line in lines)
    assert accepted_untagged == 200 and any(
        line["type"] == "warning" and "no art_provenance" in line["message"] for line in untagged_lines
    )


# -- the API's surface ---------------------------------------------------------------------------


def test_docs_are_off_by_default_and_short_tokens_are_refused_off_loopback(srv, tmp_path):
    import sys

    with httpx.Client(base_url=srv.url) as c:
        docs = [c.get(p).status_code for p in ("/docs", "/redoc", "/openapi.json")]
    with srv.client() as c:
        docs_with_token = [c.get(p).status_code for p in ("/docs", "/redoc", "/openapi.json")]
    try:
        r = subprocess.run(
            [sys.executable, "-m", "art_server", "--host", "0.0.0.0", "--token", "short", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=20,
        )
        refused = r.returncode != 0 and "needs at least 16" in r.stderr
    except subprocess.TimeoutExpired:  # it started serving
        refused = False
    report(
        "docs without a token; a 5-character token on 0.0.0.0",
        docs,
        wrong=", ".join(
            w for w in ["docs served" if 200 in docs + docs_with_token else "", "short token taken" if not refused else ""] if w
        ),
    )
    assert docs == [401, 401, 401]  # without the token nothing but /health answers
    assert docs_with_token == [404, 404, 404]
    assert refused
