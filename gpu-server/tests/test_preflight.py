"""A configuration that cannot work ends `art-server` at start-up with one line on stderr and exit
code 78, before any model loads: the real process, started as LocalBackend starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from art_server.core.config import CONFIG_ERROR_PREFIX, CONFIG_EXIT_CODE


def start(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "art_server", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["--base-model", "builtin-tiny"], {}, "base model 'builtin-tiny' not found: did you mean 'builtin:tiny'?"),
        (["--base-model", "HuggingFaceTB/SmolLM2-135M-instruct"], {}, "did you mean 'HuggingFaceTB/SmolLM2-135M-Instruct'?"),
        (["--base-model", "someone/nothing-like-it"], {}, "the server never downloads"),
        (["--engine", "gpu"], {}, "argument --engine: invalid choice: 'gpu'"),
        ([], {"ART_ENGINE": "vlm"}, "--engine (or ART_ENGINE) 'vlm' is not one of auto, hf, vllm: did you mean 'vllm'?"),
        (
            ["--engine", "vllm", "--vllm-command", "/nonexistent/vllm"],
            {},
            "--engine vllm: the vLLM command '/nonexistent/vllm' is not found",
        ),
        (["--device", "cuda"], {}, "--device cuda: torch"),
        (["--dtype", "fp8"], {}, "argument --dtype: invalid choice: 'fp8'"),
        (["--port", "eighty"], {}, "argument --port: invalid int value"),
    ],
    ids=["typo", "case", "unknown", "engine", "env-engine", "no-vllm", "no-cuda", "dtype", "port"],
)
def test_a_bad_configuration_is_one_line_and_exit_code_78(tmp_path, args, env, expected):
    if "cuda" in args:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    result = start(tmp_path, "--data-dir", str(tmp_path / "data"), *args, env=env)
    assert result.returncode == CONFIG_EXIT_CODE, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(CONFIG_ERROR_PREFIX), result.stderr
    assert expected in lines[0]
    assert result.stdout == ""


def test_a_data_dir_that_cannot_be_written_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = start(tmp_path, "--data-dir", str(blocker / "data"), "--base-model", "builtin:tiny")
    assert result.returncode == CONFIG_EXIT_CODE, result.stderr
    assert (
        result.stderr.strip() == f"{CONFIG_ERROR_PREFIX}--data-dir {blocker / 'data'} cannot be written (Not a directory); "
        "pick a folder this user can write"
    )


@pytest.mark.skipif(
    __import__("art_server.engine.vllm.process", fromlist=["vllm_argv"]).vllm_argv("auto") is not None,
    reason="vLLM is installed here: --engine vllm finds it",
)
def test_engine_vllm_on_a_machine_that_cannot_run_it_says_why_and_what_to_use(tmp_path):
    """ART_HARDWARE=no-avx512,no-cuda: the machine as one without AVX-512 and without a GPU."""
    result = start(
        tmp_path,
        "--data-dir",
        str(tmp_path / "data"),
        "--engine",
        "vllm",
        "--base-model",
        "builtin:tiny",
        env={"ART_HARDWARE": "no-avx512,no-cuda"},
    )
    assert result.returncode == CONFIG_EXIT_CODE, result.stderr
    assert result.stderr.strip().endswith(
        "--engine vllm: no vLLM found (neither the vllm CLI nor .venv-vllm beside this server's venv), and vLLM does not "
        "run on this machine (needs a Linux x86-64 CPU with AVX-512, or an NVIDIA GPU); use --engine hf (or auto)"
    ), result.stderr
