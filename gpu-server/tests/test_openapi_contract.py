"""The published contract, docs/openapi.json, against the real server, by schemathesis (the OpenAPI
fuzzer): its coverage phase (boundary values of every field) and a bounded fuzzing phase on every
route, with these checks on:

- no 5xx; every status a route answers is one its schema declares, with the declared content type,
  headers and body schema (errors included: the OpenAI-style error body);
- a missing token is a 401 and a wrong method a 405 with the `Allow` header RFC 9110 requires.

Left out, and why: `positive_data_acceptance` and `negative_data_rejection` (the server checks more
than a JSON schema can say: a tool message needs its tool_call_id, an adapter name needs `@step`, a
group needs trajectories; those requests get a 400 naming the rule, which these two checks count
against the schema), and the stateful checks that need resources linked between routes.

Examples per route: ART_CONTRACT_EXAMPLES (default 20); seeded, so a run repeats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import start_server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = os.environ.get("ART_CONTRACT_EXAMPLES", "20")
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "ignored_auth",
]


def schemathesis(url: str, token: str, schema: Path, *only: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "schemathesis.cli", "run", str(schema), "--url", url, *only]
    command += ["-H", f"Authorization: Bearer {token}", "--checks", ",".join(CHECKS), "--phases", "coverage,fuzzing"]
    command += ["-n", EXAMPLES, "--seed", "1", "--continue-on-failure", "--no-shrink", "--request-timeout", "60", "--no-color"]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"}
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("contract"), "--base-model", "builtin:tiny")
    with s.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "contract", "project": "contract", "base_model": "builtin:tiny"})
        assert r.status_code == 200, r.text
    yield s
    s.stop()


def test_the_server_does_what_docs_openapi_json_says(server):
    result = schemathesis(server.url, server.token, ROOT / "docs" / "openapi.json")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "17 passed" in result.stdout, result.stdout[-3000:]


def test_the_check_fails_on_a_status_the_schema_does_not_declare(server, tmp_path):
    schema = json.loads((ROOT / "docs" / "openapi.json").read_text())
    del schema["paths"]["/v1/art/models/{name}"]["get"]["responses"]["404"]  # the server answers 404 for an unknown model
    broken = tmp_path / "openapi.json"
    broken.write_text(json.dumps(schema))
    result = schemathesis(server.url, server.token, broken, "--include-path", "/v1/art/models/{name}", "--include-method", "GET")
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Undocumented status code" in result.stdout, result.stdout[-3000:]
