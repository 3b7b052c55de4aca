"""The server's OpenMP waiting settings (core/openmp_waiting.py): set before torch loads, the user's
own values kept (vLLM's environment: test_vllm_engine.py). What they buy is measured, not asserted
here: `npm run bench:roofline` runs a server with libgomp's defaults and one with these."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast

PROBE = (
    "import json, os, art_server, torch; print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))"
)


def probe(env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ART_OPENMP_DEFAULTS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_set_before_torch_loads_and_the_users_values_win():
    assert probe({}) == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
    assert probe({"OMP_WAIT_POLICY": "PASSIVE"}) == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "300000"}
    assert probe({"ART_OPENMP_DEFAULTS": "1"}) == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}
