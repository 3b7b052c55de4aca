"""Where vLLM runs: --inference-devices, and vLLM's own parallelism (tensor, pipeline, data) given in
--vllm-args. vLLM runs tensor x pipeline x data worker processes; each gets one device.

- cuda:<i>,...: vLLM sees exactly those GPUs (CUDA_VISIBLE_DEVICES). Several GPUs and no parallel
  size in --vllm-args: one replica per GPU (--data-parallel-size N), the better choice for models
  that fit one GPU; pass --tensor-parallel-size for one that does not.
- cpu:<cores> (vLLM's CPU build): its workers are bound to those cores, split evenly between them
  (VLLM_CPU_OMP_THREADS_BIND, "0-1|2-3"), and the whole vLLM process tree is kept on them.

With --train-devices on other devices training never shares vLLM's: vLLM does not sleep during a
step (it keeps serving) and each step's adapter is loaded on every replica when it commits.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ...core.devices import Device, DeviceError, format_cores, overlap, parse_devices

SIZE_FLAGS = {
    "--tensor-parallel-size": "tensor",
    "-tp": "tensor",
    "--pipeline-parallel-size": "pipeline",
    "-pp": "pipeline",
    "--data-parallel-size": "data",
    "-dp": "data",
}


def parallel_sizes(vllm_args: str) -> dict[str, int]:
    """The parallel sizes named in --vllm-args (absent ones are 1); `given` lists which were named."""
    sizes = {"tensor": 1, "pipeline": 1, "data": 1}
    given = []
    tokens = shlex.split(vllm_args)
    for i, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        if flag in SIZE_FLAGS:
            value = value if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if not value.isdigit() or int(value) < 1:
                raise DeviceError(f"--vllm-args: {flag} needs a positive number, not {value!r}")
            sizes[SIZE_FLAGS[flag]] = int(value)
            given.append(SIZE_FLAGS[flag])
    return {**sizes, "given": len(given)}


@dataclass
class Placement:
    devices: list[Device]
    workers: int
    extra_args: list[str]
    env: dict[str, str]
    cores: tuple[int, ...] | None  # the vLLM process tree's CPU affinity (None: not pinned)
    dedicated: bool  # training runs on other devices

    def describe(self) -> str:
        where = ",".join(d.text for d in self.devices)
        return f"vLLM on {where} ({self.workers} worker(s)){', training on other devices' if self.dedicated else ''}"


def plan_placement(inference_devices: str, vllm_args: str, train_devices: str) -> Placement | None:
    """None without --inference-devices; DeviceError for a placement that cannot work."""
    if not inference_devices:
        return None
    devices = parse_devices(inference_devices, "--inference-devices")
    sizes = parallel_sizes(vllm_args)
    extra: list[str] = []
    env: dict[str, str] = {}
    cores = None
    if devices[0].kind == "cuda":
        if len({d.index for d in devices}) < len(devices):
            raise DeviceError(f"--inference-devices {inference_devices}: a GPU is named twice")
        if not sizes["given"] and len(devices) > 1:
            extra = ["--data-parallel-size", str(len(devices))]
            sizes["data"] = len(devices)
        workers = sizes["tensor"] * sizes["pipeline"] * sizes["data"]
        if workers != len(devices):
            raise DeviceError(
                f"--inference-devices names {len(devices)} GPU(s) but vLLM runs {workers} worker(s) (tensor "
                f"{sizes['tensor']} x pipeline {sizes['pipeline']} x data {sizes['data']}, from --vllm-args); "
                "make them match: one GPU per worker"
            )
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d.index) for d in devices)
    else:
        if len(devices) > 1:
            raise DeviceError(
                f"--inference-devices {inference_devices}: name one CPU core range for vLLM (e.g. cpu:0-3); its workers split it"
            )
        workers = sizes["tensor"] * sizes["pipeline"] * sizes["data"]
        cores = devices[0].cores
        if cores:
            if workers > len(cores):
                raise DeviceError(
                    f"--inference-devices {inference_devices} gives vLLM {format_cores(cores)} for {workers} "
                    "workers (from --vllm-args); give it at least a core per worker"
                )
            per = len(cores) // workers
            groups = [cores[w * per : (w + 1) * per] if w < workers - 1 else cores[w * per :] for w in range(workers)]
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(f"{g[0]}-{g[-1]}" for g in groups)
    dedicated = False
    if train_devices:
        train = parse_devices(train_devices, "--train-devices")
        dedicated = not overlap(devices, train)
    return Placement(devices, workers, extra, env, cores, dedicated)
