"""The published contract, docs/openapi.json, against the real server, by schemathesis (the OpenAPI
fuzzer): its coverage phase (boundary values of every field) and a bounded fuzzing phase on every
route, with every check on (settings and their reasons: tests/schemathesis.toml):

- no 5xx; every status a route answers is one its schema declares, with the declared content type,
  headers and body schema (errors included: the OpenAI-style error body);
- a request the schema allows is accepted, and one it forbids is refused: the schema says what the
  validation does (names and their patterns, a tool message's tool_call_id, non-empty groups, ...).
  Values that must name what exists on this server (the model a training route trains, an adapter
  folder, the base model's modules and token ids) are put in place by tests/contract_hooks.py; the
  Responses and Messages routes skip the acceptance half (rules between items; see the toml);
- a missing token is a 401 and a wrong method a 405 with the `Allow` header RFC 9110 requires.

Left out: the stateful phase (resources linked between routes).

Examples per route: ART_CONTRACT_EXAMPLES (default 20); seeded, so a run repeats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import start_server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = os.environ.get("ART_CONTRACT_EXAMPLES", "20")


def schemathesis(server, schema: Path, *only: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(HERE / "schemathesis.toml"), "run", str(schema)]
    command += ["--url", server.url, *only, "-H", f"Authorization: Bearer {server.token}", "--phases", "coverage,fuzzing"]
    command += ["-n", EXAMPLES, "--seed", "1", "--continue-on-failure", "--no-shrink", "--request-timeout", "60", "--no-color"]
    env = {
        **os.environ,
        "SCHEMATHESIS_TELEMETRY": "false",
        "SCHEMATHESIS_HOOKS": "contract_hooks",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "ART_CONTRACT_ADAPTER": server.adapter_folder,
        "ART_CONTRACT_MODEL": "contract",
        "ART_CONTRACT_PARENT": "adapter",
        "ART_CONTRACT_VOCABULARY": str(server.vocabulary),
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=HERE, env=env)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("contract"), "--base-model", "builtin:tiny")
    with s.client() as c:
        for name in ("contract", "adapter"):  # the fuzzer trains the first; the second's step 0 is a folder to load
            r = c.post("/v1/art/models/register", json={"name": name, "project": "contract", "base_model": "builtin:tiny"})
            assert r.status_code == 200, r.text
        s.adapter_folder = c.get("/v1/art/models/adapter/checkpoints").json()["checkpoints"][0]["path"]  # pyright: ignore[reportAttributeAccessIssue]  (this module's own fields)
    (config,) = s.data_dir.glob("builtin/tiny-*/config.json")
    s.vocabulary = json.loads(config.read_text())["vocab_size"]  # pyright: ignore[reportAttributeAccessIssue]
    yield s
    s.stop()


@pytest.mark.timeout(900)  # 2.3-3.2 min alone on 2 cores (3 seeds); beside the other lane about twice that
def test_the_server_does_what_docs_openapi_json_says(server):
    result = schemathesis(server, ROOT / "docs" / "openapi.json")
    # Each failure's status and response body come first (a fuzzed request body can be tens of kB)
    failures = result.stdout[result.stdout.find("FAILURES") :] if "FAILURES" in result.stdout else ""
    assert result.returncode == 0, "\n".join(line[:1500] for line in failures.splitlines())[:8000] + result.stderr[-2000:]
    assert "18 passed" in result.stdout, result.stdout[-3000:]


@pytest.mark.fast
def test_the_served_schema_states_the_servers_own_max_n():
    from art_server.api.app import create_app
    from art_server.core.config import ServerConfig

    def n_of(config: ServerConfig) -> dict:
        return create_app(config).openapi()["components"]["schemas"]["ChatCompletionRequest"]["properties"]["n"]

    assert n_of(ServerConfig(docs=True, max_n=8))["maximum"] == 8
    documented = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert (
        n_of(ServerConfig(docs=True))["maximum"]
        == documented["components"]["schemas"]["ChatCompletionRequest"]["properties"]["n"]["maximum"]
        == ServerConfig().max_n
    )


def test_the_published_schema_uses_json_schema_keywords_for_bounds():
    # pydantic writes a bound it cannot place in the core schema under its own name ("ge"), which
    # JSON Schema ignores: the bound then exists in the validation only.
    found: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            found.extend(f"{where}/{k}" for k in ("ge", "gt", "le", "lt") if k in node and not isinstance(node[k], dict))
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(json.loads((ROOT / "docs" / "openapi.json").read_text()), "#")
    assert not found, found


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/chat/completions", {"n": 1.0}, 200),  # JSON Schema's integer: 1 and 1.0
        ("/v1/chat/completions", {"n": True}, 400),  # never true, nor "1"
        ("/v1/chat/completions", {"n": "1"}, 400),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": False}, 400),
        ("/v1/chat/completions", {"temperature": True}, 400),  # a number is never true either
        ("/v1/messages", {"top_k": True}, 400),
        ("/v1/art/models/contract/train", {"config": {"gradient_steps": True}}, 400),
        ("/v1/art/models/contract/train_sft", {"config": {"epochs": "1"}}, 400),
    ],
)
def test_numbers_are_typed_as_the_schema_says(server, path, body, status):
    chat = {"model": "contract", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    bodies = {
        "/v1/chat/completions": chat,
        "/v1/messages": {**chat, "model": "contract"},
        "/v1/art/models/contract/train": {
            "groups": [[{"messages_and_choices": [{"role": "user", "content": "Hi"}], "reward": 1}]]
        },
        "/v1/art/models/contract/train_sft": {"conversations": [{"messages": [{"role": "user", "content": "Hi"}]}]},
    }
    with server.client() as c:
        r = c.post(path, json={**bodies[path], **body})
    assert r.status_code == status, r.text
    if status == 400:
        assert next(iter(body)) in r.text, r.text


def test_the_check_fails_on_a_status_the_schema_does_not_declare(server, tmp_path):
    schema = json.loads((ROOT / "docs" / "openapi.json").read_text())
    del schema["paths"]["/v1/art/models/{name}"]["get"]["responses"]["404"]  # the server answers 404 for an unknown model
    broken = tmp_path / "openapi.json"
    broken.write_text(json.dumps(schema))
    result = schemathesis(server, broken, "--include-path", "/v1/art/models/{name}", "--include-method", "GET")
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Undocumented status code" in result.stdout, result.stdout[-3000:]


def test_the_check_fails_on_a_schema_looser_than_the_validation(server, tmp_path):
    schema = json.loads((ROOT / "docs" / "openapi.json").read_text())
    del schema["components"]["schemas"]["RegisterRequest"]["properties"]["name"]["pattern"]  # the server checks names
    broken = tmp_path / "openapi.json"
    broken.write_text(json.dumps(schema))
    result = schemathesis(server, broken, "--include-path", "/v1/art/models/register")
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Schema-valid request rejected" in result.stdout, result.stdout[-3000:]
