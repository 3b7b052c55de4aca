"""How torch's OpenMP threads wait between operators, set before torch is first imported.

libgomp (the OpenMP runtime in torch's CPU wheels) gives every thread that runs a parallel operator
a team of its own, and once the process holds more OpenMP threads than CPUs it lets idle workers
spin only 100 times before sleeping in the kernel. The server has such threads from the start of
its first step: the engine's decode thread and the trainer's worker each own a team (the model
lock lets only one of them compute at a time). Every small operator then pays a sleep and a wake-up:
measured on 2 cores, an elementwise op on 200k floats 10 -> 46-61 us while a second team exists, and
the same SFT step 4.0 s -> 7.3 s (1.8 -> 1.2 cores busy) from the server's second step on; which
step it starts at depends on what ran first, one cause of SFT step times that wander.

`OMP_WAIT_POLICY=ACTIVE` raises that throttled spin to 1000; `GOMP_SPINCOUNT=300000` keeps the
unthrottled spin at libgomp's default, so an idle server still sleeps after a fraction of a
millisecond (ACTIVE alone spins a core at 100% for minutes after each operator). With both: the
elementwise op 12-14 us with a second team alive, the SFT step 3.6-5.8 s (bench/roofline.py).
A user's own values win; vLLM's processes get the environment without ours (engine/vllm/process.py);
`ART_OPENMP_DEFAULTS=1` leaves libgomp's defaults (bench/roofline.py measures both in one run).
"""

from __future__ import annotations

import os
import sys

SETTINGS = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
applied: dict[str, str] = {}  # what this module set (not the user): taken out again for vLLM


def wait_briefly_between_operators() -> None:
    if "torch" in sys.modules or os.environ.get("ART_OPENMP_DEFAULTS") == "1":  # too late (libgomp read it) / not wanted
        return
    for key, value in SETTINGS.items():
        if key not in os.environ:
            os.environ[key] = value
            applied[key] = value
