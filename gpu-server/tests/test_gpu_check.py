"""scripts/gpu-check.py, the one script a lent GPU machine runs, kept working: the same code path on
the CPU with a tiny shape, in a fresh process, writing its JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_the_engine_and_a_grpo_step_and_reports_against_the_bandwidth_bound(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check.py"), "--device", "cpu", "--shape", "tiny",
                             "--dtype", "float32", "--concurrency", "1,8", "--prompt-tokens", "16", "--new-tokens", "8",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [r["concurrency"] for r in report["serving"]] == [1, 8]
    assert all(r["tokens"] == r["concurrency"] * 8 and r["tokens_per_s"] > 0 and r["bound_tokens_per_s"] > 0
               for r in report["serving"])
    step = report["grpo_step"]
    assert step["weights_finite"] and step["tokens_trained"] == 8 * 8 * 8
    assert "tokens/s bound by bandwidth" in result.stdout and "GRPO step on LoRA" in result.stdout
