"""The published contract, docs/openapi.json, against the real server, by schemathesis (the OpenAPI
fuzzer): its coverage phase (boundary values of every field) and a bounded fuzzing phase on every
route, with every check on (settings and their reasons: tests/schemathesis.toml):

- no 5xx; every status a route answers is one its schema declares, with the declared content type,
  headers and body schema (errors included: the OpenAI-style error body);
- a request the schema allows is accepted, and one it forbids is refused: the schema says what the
  validation does (names and their patterns, a tool message's tool_call_id, non-empty groups, ...).
  Values that must name what exists on this server (an adapter folder, the base model's modules) are
  put in place by tests/contract_hooks.py; the Responses and Messages routes skip the acceptance
  half (rules between items; see the toml);
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
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=1500, cwd=HERE, env=env)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("contract"), "--base-model", "builtin:tiny")
    with s.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "contract", "project": "contract", "base_model": "builtin:tiny"})
        assert r.status_code == 200, r.text
        s.adapter_folder = c.get("/v1/art/models/contract/checkpoints").json()["checkpoints"][0]["path"]  # pyright: ignore[reportAttributeAccessIssue]  (this module's own field)
    yield s
    s.stop()


@pytest.mark.timeout(1500)  # its coverage phase alone took 406 s on 2 cores; several minutes more beside the other lanes
def test_the_server_does_what_docs_openapi_json_says(server):
    result = schemathesis(server, ROOT / "docs" / "openapi.json")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "17 passed" in result.stdout, result.stdout[-3000:]


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
