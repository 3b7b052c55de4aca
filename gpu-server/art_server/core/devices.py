"""Device lists for --train-devices and --inference-devices: `cuda:<i>`, `cpu` (every core), or
`cpu:<cores>` (cores `3` or `0-3`: pinned to them, so training and serving can each own cores of one
CPU the way they would own GPUs). A device that does not exist is a DeviceError naming it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .process import ALL_CORES

CPU_CORES = re.compile(r"^(\d+)(?:-(\d+))?$")


class DeviceError(ValueError):
    pass


@dataclass(frozen=True)
class Device:
    text: str
    kind: str  # cpu | cuda
    index: int | None = None  # cuda
    cores: tuple[int, ...] | None = None  # cpu: pinned to these (None: not pinned)

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


def usable_cores() -> list[int]:
    """The cores this server was given at start (not a rank's pinning since)."""
    return sorted(ALL_CORES) if ALL_CORES else list(range(os.cpu_count() or 1))


def parse_device(text: str, flag: str) -> Device:
    kind, _, rest = text.strip().partition(":")
    if kind == "cpu":
        if not rest:
            return Device(text, "cpu")
        m = CPU_CORES.match(rest)
        if not m:
            raise DeviceError(f"{flag}: {text!r} is not a CPU device; write cpu, cpu:<core> or cpu:<first>-<last>")
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        cores = tuple(range(first, last + 1))
        missing = sorted(set(cores) - set(usable_cores()))
        if not cores or missing:
            raise DeviceError(
                f"{flag}: {text} names core(s) {missing or [first]} this process cannot use "
                f"(it has {format_cores(usable_cores())})"
            )
        return Device(text, "cpu", cores=cores)
    if kind == "cuda":
        if not rest.isdigit():
            raise DeviceError(f"{flag}: {text!r} is not a CUDA device; write cuda:<index>, e.g. cuda:0")
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(rest) >= count:
            raise DeviceError(
                f"{flag}: {text} does not exist (this machine has {count} CUDA device(s)"
                f"{': cuda:0..cuda:' + str(count - 1) if count else ''})"
            )
        return Device(text, "cuda", index=int(rest))
    raise DeviceError(f"{flag}: {text!r} is not a device; write cuda:<index>, cpu, or cpu:<cores>")


def parse_devices(spec: str, flag: str) -> list[Device]:
    devices = [parse_device(d, flag) for d in spec.split(",") if d.strip()]
    if len({d.kind for d in devices}) > 1:
        raise DeviceError(f"{flag} {spec}: mixes CPU and CUDA devices; use one kind")
    return devices


def format_cores(cores: list[int] | tuple[int, ...]) -> str:
    return (
        f"cores {cores[0]}-{cores[-1]}"
        if len(cores) > 1 and list(cores) == list(range(cores[0], cores[-1] + 1))
        else f"core(s) {', '.join(map(str, cores))}"
    )


def overlap(a: list[Device], b: list[Device]) -> list[str]:
    """What two device lists share (a whole CPU overlaps any core of it)."""
    shared = []
    for x in a:
        for y in b:
            if x.kind != y.kind:
                continue
            if x.kind == "cuda" and x.index == y.index:
                shared.append(x.text)
            if x.kind == "cpu" and (x.cores is None or y.cores is None or set(x.cores) & set(y.cores)):
                shared.append(f"{x.text} and {y.text}")
    return shared
