"""scripts/gpu-check.py and gpu-check-vllm.py, the scripts a lent GPU machine runs, kept working: the
same code paths on the CPU with small shapes, in fresh processes, writing their JSON reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_the_engine_and_a_grpo_step_and_reports_against_the_bandwidth_bound(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gpu-check.py"),
            "--device",
            "cpu",
            "--shape",
            "tiny",
            "--dtype",
            "float32",
            "--concurrency",
            "1,8",
            "--prompt-tokens",
            "16",
            "--new-tokens",
            "8",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [r["concurrency"] for r in report["serving"]] == [1, 8]
    assert all(
        r["tokens"] == r["concurrency"] * 8 and r["tokens_per_s"] > 0 and r["bound_tokens_per_s"] > 0 for r in report["serving"]
    )
    step = report["grpo_step"]
    assert step["weights_finite"] and step["tokens_trained"] == 8 * 8 * 8
    assert "tokens/s bound by bandwidth" in result.stdout and "GRPO step on LoRA" in result.stdout


@pytest.mark.needs("vllm")
def test_gpu_check_vllm_runs_the_vllm_engine_path_on_vllms_cpu_build(tmp_path):
    """scripts/gpu-check-vllm.py, the vllm engine's GPU script, on vLLM's CPU build: served, swept,
    a GRPO step on vLLM's samples hot-loaded back into vLLM, the logprobs compared (fp32: close)."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gpu-check-vllm.py"),
            "--shape",
            "builtin-small",
            "--dtype",
            "float32",
            "--concurrency",
            "1,4",
            "--new-tokens",
            "8",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check-vllm.json").read_text())
    assert report["engine_stats"]["engine"] == "vllm"
    assert [r["concurrency"] for r in report["serving"]] == [1, 4] and all(r["tokens"] > 0 for r in report["serving"])
    step = report["grpo_step"]
    assert step["step"] == 1 and step["tokens_trained"] > 0 and step["reload_s"] >= 0
    assert step["sampler_logprob_diff_mean"] < 2e-3 and abs(step["importance_ratio_mean"] - 1) < 1e-6, step
    assert "hot-load into vLLM" in result.stdout and "trainer vs vLLM logprobs" in result.stdout
