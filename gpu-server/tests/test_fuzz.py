"""A property-based fuzz suite over every route of the real server: hypothesis takes a valid request
of each route and breaks it (a field replaced by any JSON value: huge or negative integers, NaN and
infinities, numbers too small for float32, long or odd strings, names ending in a newline, reserved
names, objects nested hundreds deep; a field removed; an unknown field added; the body not JSON at
all) and asserts that the server answers every one with a status below 500 (a training stream's
error line included), within 60 s, that every chat completion it answers carries finite logprobs,
and that it still serves afterwards.

Examples per route: ART_FUZZ_EXAMPLES (default 60; derandomized, so a run repeats). The named
regressions of issue 14 are in test_reliability.py."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ServerProcess, start_server
from dialects import messages_body, responses_body
from rl import choice_item, sample

EXAMPLES = int(os.environ.get("ART_FUZZ_EXAMPLES", "60"))
PROMPT = [{"role": "user", "content": "Name an empty cell."}]
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Values that broke servers before: numbers past 64 bits, float extremes, ids past a vocabulary,
# step suffixes that are not ASCII digits, paths; drawn as often as arbitrary values.
nasty_numbers = st.sampled_from(
    [
        0,
        -1,
        1,
        2**31,
        2**63,
        2**64,
        2**70,
        -(2**70),
        10**9,
        49152,
        10**30,
        1e308,
        -1e308,
        float("inf"),
        float("-inf"),
        float("nan"),
        5e-324,
        1e6 + 1,
        1e-38,
        1e-45,
        1e-300,
        5e-6,
    ]
)
nasty_strings = st.sampled_from(
    [
        "",
        "²",
        "@",
        "x@1",
        "../../etc",
        "/",
        "/etc",
        "~",
        "a" * 5000,
        "\u0000",
        "fuzz@0",
        "fuzz@²",
        "fuzz@" + "9" * 5000,
        "fuzz@-1",
        "fuzz@1e3",
        "builtin:tiny@0",
        "nonexistent",
        "fuzz\n",
        "fuzz2\n",
        "val\n",
        "fuzz@0\n",
        "server.json",
        "server-identity.json",
        "builtin",
    ]
)


def nested(levels: int) -> dict:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


deep_values = st.integers(min_value=60, max_value=320).map(nested)
scalars = st.one_of(
    nasty_numbers,
    nasty_strings,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
values = st.one_of(
    st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
        max_leaves=12,
    ),
    deep_values,
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every position in a JSON value (the value itself included)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:3]):
            out += paths(child, (*prefix, index))
    return out


def _at(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return copy


def removed(value: Any, path: tuple) -> Any:
    copy = json.loads(json.dumps(value))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return copy


def inserted(value: Any, path: tuple, key: str, new: Any) -> Any:
    """`value` with `key: new` added to the object at `path` (unchanged when that is not an object)."""
    copy = json.loads(json.dumps(value))
    target = copy
    for step in path:
        target = target[step]
    if isinstance(target, dict):
        target[key] = new
    return copy


def mutations(valid: Any) -> st.SearchStrategy[bytes]:
    """Bodies made from `valid`: a position replaced, removed or given a sibling; or not JSON."""
    spots = paths(valid)
    leaves = [p for p in spots if not isinstance(_at(valid, p), (dict, list))]
    objects = [p for p in spots if isinstance(json.loads(json.dumps(valid)) if not p else _at(valid, p), dict)]
    # Mostly single values (ids, numbers, names), sometimes a whole object or list.
    replace = st.builds(
        lambda p, v: replaced(valid, p, v),
        st.one_of(st.sampled_from(leaves), st.sampled_from(leaves), st.sampled_from(spots)),
        values,
    )
    remove = st.builds(lambda p: removed(valid, p), st.sampled_from([p for p in spots if p]))
    extra = st.builds(lambda p, k, v: inserted(valid, p, k, v), st.sampled_from(objects), st.text(max_size=10), values)
    as_json = st.one_of(replace, remove, extra).map(lambda body: json.dumps(body, allow_nan=True).encode())
    not_json = st.one_of(st.binary(max_size=64), st.just(json.dumps(valid).encode()[:-3]), st.just(b""))
    return st.one_of(as_json, as_json, as_json, as_json, not_json)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("fuzz"), "--base-model", "builtin:tiny", "--max-body-bytes", "2000000")
    with s.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "fuzz", "project": "fuzz", "base_model": "builtin:tiny"})
        assert r.status_code == 200, r.text
    yield s
    s.stop()


@pytest.fixture(scope="module")
def group(fuzz_server) -> list[dict]:
    with fuzz_server.client() as c:
        r = sample(c, "fuzz", PROMPT, 2, 4, seed=0)
    return [{"messages_and_choices": [*PROMPT, choice_item(r, ch)], "reward": reward} for ch, reward in zip(r["choices"], [1, 0])]


def send(server: ServerProcess, method: str, path: str, body: bytes | None) -> list[int]:
    """The status of one request (and of a training stream's error line); a hang fails the test."""
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream(method, path, content=body, headers=headers) as r:
            statuses = [r.status_code]
            if r.status_code == 200 and "ndjson" in r.headers.get("content-type", ""):
                for line in r.iter_lines():
                    if line.strip() and json.loads(line).get("type") == "error":
                        statuses.append(json.loads(line).get("status", 500))
            else:
                r.read()
                if r.status_code == 200 and "json" in r.headers.get("content-type", ""):
                    answer = r.json()
                    for choice in (
                        answer["choices"] if path.endswith("/chat/completions") else [answer] if "token_ids" in answer else []
                    ):
                        logprobs = [e["logprob"] for e in (choice.get("logprobs") or {}).get("content") or []]
                        assert all(isinstance(x, float) and math.isfinite(x) for x in logprobs), f"garbage sampled: {choice}"
    return statuses


def check(server: ServerProcess, method: str, path: str, body: bytes | None) -> None:
    statuses = send(server, method, path, body)
    assert all(s < 500 for s in statuses), f"{method} {path} {body[:300] if body else body!r} -> {statuses}"


def routes(group: list[dict]) -> dict[str, tuple[str, str, Any]]:
    return {
        "chat": (
            "POST",
            "/v1/chat/completions",
            {"model": "fuzz", "messages": PROMPT, "max_tokens": 4, "seed": 1, "temperature": 1.0, "top_p": 1.0, "logprobs": True},
        ),
        "responses": ("POST", "/v1/responses", responses_body("fuzz", max_tokens=4)),
        "messages": ("POST", "/v1/messages", messages_body("fuzz", max_tokens=4)),
        "register": (
            "POST",
            "/v1/art/models/register",
            {
                "name": "fuzz2",
                "project": "fuzz",
                "base_model": "builtin:tiny",
                "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj"]},
            },
        ),
        "train": (
            "POST",
            "/v1/art/models/fuzz/train",
            {"groups": [group], "config": {"learning_rate": 1e-4}, "serve_previous_during_training": False},
        ),
        "train_sft": (
            "POST",
            "/v1/art/models/fuzz/train_sft",
            {
                "conversations": [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}],
                "config": {"epochs": 1, "batch_size": 1},
            },
        ),
        "log": ("POST", "/v1/art/models/fuzz/log", {"split": "val", "groups": [group]}),
        "delete_checkpoints": ("POST", "/v1/art/models/fuzz/delete_checkpoints", {"keep_best_by": "val/reward"}),
        "load_adapter": ("POST", "/v1/load_lora_adapter", {"lora_name": "other@3", "lora_path": "/tmp"}),
        "unload_adapter": ("POST", "/v1/unload_lora_adapter", {"lora_name": "other@3"}),
    }


@pytest.mark.parametrize(
    "route",
    [
        "chat",
        "responses",
        "messages",
        "register",
        "train",
        "train_sft",
        "log",
        "delete_checkpoints",
        "load_adapter",
        "unload_adapter",
    ],
)
def test_no_body_gets_a_5xx_or_hangs(fuzz_server, group, route):
    method, path, valid = routes(group)[route]
    assert send(fuzz_server, method, path, json.dumps(valid).encode())[0] < 500

    @FUZZ
    @given(body=mutations(valid))
    def fuzz(body: bytes) -> None:
        check(fuzz_server, method, path, body)

    fuzz()


@FUZZ
@given(
    segment=st.one_of(st.text(min_size=1, max_size=30), st.sampled_from(["fuzz", "fuzz@0", "%C2%B2", "9" * 500, "..", "%00"])),
    step=st.one_of(st.integers(-5, 10**12).map(str), st.text(min_size=1, max_size=8)),
    filename=st.sampled_from(["adapter_config.json", "adapter_model.safetensors", "state.json", "..%2F..%2Fserver.json"]),
)
def test_no_path_gets_a_5xx(fuzz_server, segment, step, filename):
    name = segment.replace("/", "%2F").replace("?", "%3F").replace("#", "%23")
    for path in (
        f"/v1/art/models/{name}",
        f"/v1/art/models/{name}/history",
        f"/v1/art/models/{name}/checkpoints",
        f"/v1/art/models/fuzz/checkpoints/{step}/files/{filename}",
        f"/v1/art/models/{name}/checkpoints/0/files/{filename}",
    ):
        try:
            check(fuzz_server, "GET", path, None)
        except httpx.InvalidURL:
            pass  # httpx refuses to send it: nothing reaches the server


def test_the_server_still_serves_after_the_fuzzing(fuzz_server):
    with fuzz_server.client() as c:
        assert c.get("/health").status_code == 200
        r = c.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 4})
        assert r.status_code == 200, r.text
