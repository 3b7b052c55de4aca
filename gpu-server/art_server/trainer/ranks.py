"""Trainer ranks: the server is rank 0 of a torch.distributed process group whose other ranks are
worker processes (rank_worker.py), started by the server on this machine or by hand (or torchrun)
on others. They meet through a TCPStore that rank 0 hosts at --train-master-addr:port.

Joining: the store holds `generation` (bumped on every restart); a worker writes
`g<N>/joined/<rank>` (its version, pid, host, device) and waits for `g<N>/verdict`. Rank 0 waits up
to --train-rendezvous-timeout for every rank, checks versions, writes the verdict, and all of them
create the process group (gloo on CPU, NCCL on CUDA) with --train-rank-timeout on every collective.

A step: rank 0 sets `g<N>/step/<i>` (workers wait on it however long the server is idle; a store
wait, not a collective, so an idle pool never times out), then broadcasts the step (its sequences,
config and rank 0's adapter weights: a worker keeps no state between steps), and every rank trains
its shard (parallel.py). A rank that dies or stops answering fails the step with RankFailed within
the rank timeout; the step rolls back on rank 0 (service.py), and the pool restarts its workers
before the next step (ranks on other machines must be started again; the error says how).

Over 400 lines: the rendezvous and the step protocol of rank 0 are one state machine over the same store keys; rank_worker.py is the other side.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import __version__
from ..core.devices import Device, DeviceError, format_cores, parse_devices, usable_cores
from .guard import StepCancelled
from .parallel import DistributedSync, RankFailed, RankLost

log = logging.getLogger(__name__)

IDLE_WAIT = datetime.timedelta(days=3650)  # a worker waits for the next step as long as the server lives


class RankSetupError(Exception):
    """The ranks could not be brought together (a configuration error: one line, at start-up)."""


@dataclass
class RankPlan:
    """What --train-ranks and its companion flags ask for."""

    world: int
    local: int  # ranks this server starts: 0 (itself) .. local-1
    devices: list[Device]  # one per local rank
    master_addr: str
    master_port: int
    rendezvous_timeout_s: float
    rank_timeout_s: float
    threads_override: int  # --train-threads-per-rank (0: by the rank's cores)
    shard_base: bool = False  # --train-shard-base (sharding.py)

    @property
    def backend(self) -> str:
        return "nccl" if self.devices[0].kind == "cuda" else "gloo"

    def threads(self, rank: int) -> int:
        """CPU threads of a local rank: its pinned cores, else the flag, else the cores shared evenly."""
        cores = self.devices[rank].cores
        return self.threads_override or (len(cores) if cores else max(1, len(usable_cores()) // self.local))

    def worker_command(self, rank: int) -> str:
        """The command that starts `rank` on another machine (printed while rank 0 waits for it)."""
        return (
            f"RANK={rank} WORLD_SIZE={self.world} MASTER_ADDR={self.master_addr} MASTER_PORT={self.master_port} "
            f"python -m art_server.trainer.rank_worker"
        )


def plan_devices(spec: str, local: int, device: str) -> list[Device]:
    """The device of each local rank: --train-devices as given, else cuda:i with CUDA, else the CPU."""
    if spec:
        devices = parse_devices(spec, "--train-devices")
        if len(devices) != local:
            raise RankSetupError(
                f"--train-devices names {len(devices)} device(s) for {local} rank(s) on this machine; "
                "name one per rank (e.g. --train-devices cuda:0,cuda:1 or cpu:0,cpu:1)"
            )
    else:
        cuda = device in ("auto", "cuda") and torch.cuda.is_available()
        devices = [Device(f"cuda:{i}", "cuda", index=i) if cuda else Device("cpu", "cpu") for i in range(local)]
    if devices[0].kind == "cuda":
        if len({d.index for d in devices}) < len(devices):
            raise RankSetupError(f"--train-devices {spec}: two ranks on one GPU; give each rank its own device")
        return devices
    pinned = [d for d in devices if d.cores]
    if pinned and len(pinned) < len(devices):
        raise RankSetupError(f"--train-devices {spec}: pin every CPU rank to its cores (cpu:<cores>), or none (cpu)")
    if pinned:
        for i, d in enumerate(devices):
            for e in devices[i + 1 :]:
                if set(d.cores or ()) & set(e.cores or ()):
                    raise RankSetupError(f"--train-devices {spec}: ranks on {d.text} and {e.text} share cores; give each its own")
    elif local > len(usable_cores()):
        raise RankSetupError(
            f"--train-ranks: {local} CPU ranks on this machine, which has {len(usable_cores())} cores; "
            f"start at most {len(usable_cores())} here (each needs a core of its own)"
        )
    return devices


def rank_plan(config: Any) -> RankPlan | None:
    """The ranks a ServerConfig asks for (None: one process on the default device, the default);
    RankSetupError names the flag that cannot work."""
    world = config.train_ranks
    if world == 1 and not config.train_local_ranks and not config.train_devices and not config.train_shard_base:
        return None
    if config.train_shard_base and world < 2:
        raise RankSetupError("--train-shard-base shards the base model across trainer ranks: set --train-ranks 2 or more")
    if world < 1:
        raise RankSetupError(f"--train-ranks {world}: give 1 or more")
    local = config.train_local_ranks or world
    if not 1 <= local <= world:
        raise RankSetupError(f"--train-local-ranks {local}: give 1 (this server alone) to --train-ranks ({world})")
    if local < world and not config.train_master_port:
        raise RankSetupError(
            f"ranks {local}..{world - 1} join from other machines, so they need a fixed rendezvous port: "
            "set --train-master-port (and --train-master-addr to an address they reach)"
        )
    if config.train_rendezvous_timeout_s <= 0 or config.train_rank_timeout_s <= 0:
        raise RankSetupError("--train-rendezvous-timeout and --train-rank-timeout must be positive seconds")
    try:
        devices = plan_devices(config.train_devices, local, config.device)
    except DeviceError as error:
        raise RankSetupError(str(error)) from None
    return RankPlan(
        world,
        local,
        devices,
        config.train_master_addr,
        config.train_master_port,
        config.train_rendezvous_timeout_s,
        config.train_rank_timeout_s,
        config.train_threads_per_rank,
        config.train_shard_base,
    )


def pin_rank_zero(plan: RankPlan) -> None:
    """Rank 0 is this server process: pinned to its cores when --train-devices names them (before
    the threads that inherit the pinning start), with a thread per core."""
    cores = plan.devices[0].cores
    if cores:
        for thread in os.listdir("/proc/self/task"):  # every thread so far; later ones inherit it
            os.sched_setaffinity(int(thread), cores)
        torch.set_num_threads(len(cores))
        log.info("training in this process is pinned to %s", format_cores(cores))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class RankPool:
    """Rank 0's side: starts (and restarts) the local workers, hosts the store, runs each step."""

    def __init__(self, plan: RankPlan):
        self.plan = plan
        self.store: Any = None
        self.generation = 0
        self.steps = 0
        self.workers: dict[int, subprocess.Popen] = {}
        self.broken: str | None = None  # why the process group cannot be used (restart before the next step)
        self.fatal: str | None = None  # why no step can train until the server restarts (a sharded base lost a rank)
        self.closed = False
        self._lock = threading.Lock()
        self.device = torch.device(plan.devices[0].torch_device)

    # -- start, restart, stop ----------------------------------------------------------------
    def start(self) -> None:
        import torch.distributed as dist

        plan = self.plan
        if self.store is None:
            port = plan.master_port or free_port(plan.master_addr)
            try:
                self.store = dist.TCPStore(
                    plan.master_addr, port, None, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False
                )
            except Exception as error:
                raise RankSetupError(
                    f"cannot host the trainer ranks' rendezvous at {plan.master_addr}:{port} ({error}); "
                    "pick another --train-master-port"
                ) from None
            plan.master_port = self.store.port
        self.generation += 1
        self.steps = 0
        prefix = f"g{self.generation}/"
        self.store.set("generation", str(self.generation))
        for rank in range(1, plan.local):
            self.workers[rank] = self._spawn(rank)
        if plan.world == 1:
            return  # nothing to bring together: one process, pinned (pin_rank_zero)
        if plan.world > plan.local:
            log.info(
                "waiting for trainer ranks %d..%d from other machines; on each, run: %s",
                plan.local,
                plan.world - 1,
                plan.worker_command(plan.local),
            )
        joined = self._rendezvous(prefix)
        stale = {r: j for r, j in joined.items() if j.get("version") != __version__ or j.get("torch") != torch.__version__}
        if stale:
            reason = "; ".join(
                f"rank {r} runs art-server {j.get('version')} with torch {j.get('torch')}" for r, j in stale.items()
            )
            self.store.set(prefix + "verdict", json.dumps({"ok": False, "reason": reason}))
            raise RankSetupError(
                f"trainer ranks of different versions: rank 0 runs art-server {__version__} with torch "
                f"{torch.__version__}, {reason}; install the same version on every machine"
            )
        self.store.set(
            prefix + "verdict",
            json.dumps(
                {"ok": True, "backend": plan.backend, "rank_timeout_s": plan.rank_timeout_s, "shard_base": plan.shard_base}
            ),
        )
        if plan.backend == "nccl":
            torch.cuda.set_device(self.device)
        dist.init_process_group(
            plan.backend,
            store=dist.PrefixStore(prefix + "pg/", self.store),
            rank=0,
            world_size=plan.world,
            timeout=datetime.timedelta(seconds=plan.rank_timeout_s),
        )
        self.broken = None
        log.info(
            "trainer ranks ready: %d rank(s) (0: this process, %s), %s, generation %d",
            plan.world,
            ", ".join(f"{r}: pid {j['pid']} {j['device']}" for r, j in sorted(joined.items())),
            plan.backend,
            self.generation,
        )

    def _spawn(self, rank: int) -> subprocess.Popen:
        plan = self.plan
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(plan.world),
            "MASTER_ADDR": plan.master_addr,
            "MASTER_PORT": str(plan.master_port),
            "ART_RANK_PARENT": str(os.getpid()),
        }
        if self.generation > 1:
            env.pop("ART_FAULT", None)  # an injected fault fires once, not again in the restarted worker
        device = plan.devices[rank]
        argv = [
            sys.executable,
            "-m",
            "art_server.trainer.rank_worker",
            "--device",
            device.torch_device,
            "--threads",
            str(plan.threads(rank)),
        ]
        if device.cores:
            argv += ["--cores", f"{device.cores[0]}-{device.cores[-1]}"]
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)

    def _rendezvous(self, prefix: str) -> dict[int, dict[str, Any]]:
        plan = self.plan
        deadline = time.monotonic() + plan.rendezvous_timeout_s
        joined: dict[int, dict[str, Any]] = {}
        while True:
            for rank in range(1, plan.world):
                if rank not in joined and self.store.check([f"{prefix}joined/{rank}"]):
                    joined[rank] = json.loads(self.store.get(f"{prefix}joined/{rank}"))
            if len(joined) == plan.world - 1:
                return joined
            dead = {r: p.returncode for r, p in self.workers.items() if r not in joined and p.poll() is not None}
            if dead:
                self._stop_workers()
                raise RankSetupError(
                    "trainer rank(s) exited before joining: "
                    + ", ".join(f"rank {r} with code {c}" for r, c in dead.items())
                    + " (see the log above)"
                )
            if time.monotonic() > deadline:
                missing = [r for r in range(1, plan.world) if r not in joined]
                self._stop_workers()
                remote = [r for r in missing if r >= plan.local]
                hint = (
                    f"; start them on their machines with: {plan.worker_command(remote[0])} (RANK={', '.join(map(str, remote))})"
                    if remote
                    else ""
                )
                raise RankSetupError(
                    f"trainer rank(s) {', '.join(map(str, missing))} of {plan.world} did not join within "
                    f"{plan.rendezvous_timeout_s:g} s (--train-rendezvous-timeout){hint}"
                )
            time.sleep(0.05)

    def _stop_workers(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in self.workers.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.workers.clear()

    def _restart(self) -> None:
        import torch.distributed as dist

        log.warning("restarting the trainer ranks (%s)", self.broken)
        self._stop_workers()
        if dist.is_initialized():
            dist.destroy_process_group()
        self.start()

    def close(self) -> None:
        """Stops the workers (they exit at the stop word, or are killed) and the process group. A step
        still waiting on a rank does not hold the server's exit: its workers are killed."""
        import torch.distributed as dist

        idle = self._lock.acquire(timeout=5)
        try:
            if self.closed:
                return
            self.closed = True
            if idle and self.store is not None and self.broken is None:
                with contextlib.suppress(Exception):
                    self.store.set(f"g{self.generation}/step/{self.steps + 1}", "stop")
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and any(p.poll() is None for p in self.workers.values()):
                    time.sleep(0.05)
            self._stop_workers()
            if idle and dist.is_initialized():
                dist.destroy_process_group()
        finally:
            if idle:
                self._lock.release()

    def describe(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "world": plan.world,
            "local": plan.local,
            "backend": plan.backend,
            "devices": [d.text for d in plan.devices],
            "threads": [plan.threads(r) for r in range(plan.local)],
            "generation": self.generation,
            "restarts": self.generation - 1,
            "steps_this_generation": self.steps,
            "broken": self.broken,
            "fatal": self.fatal,
            "workers": {r: {"pid": p.pid, "alive": p.poll() is None} for r, p in sorted(self.workers.items())},
            "rendezvous": f"{plan.master_addr}:{plan.master_port}",
            "shard_base": plan.shard_base,
        }

    # -- a step --------------------------------------------------------------------------------
    def lost(self) -> str:
        """What became of the local workers, for the error of a step that lost a rank."""
        gone = []
        for rank, process in sorted(self.workers.items()):
            code = process.poll()
            if code is not None:
                gone.append(
                    f"rank {rank} (pid {process.pid}) "
                    + (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
                )
        return "; ".join(gone)

    def run(self, header: dict[str, Any], train: Callable[[DistributedSync], dict[str, Any]]) -> dict[str, Any]:
        """Runs one step on every rank: `header` goes to the workers (rank_worker.py runs it), `train`
        runs rank 0's share with the step's sync."""
        import torch.distributed as dist

        with self._lock:
            if self.closed:
                raise RankFailed("the trainer ranks are stopped (the server is stopping)")
            if self.fatal:
                raise RankFailed(self.fatal)
            dead = self.lost()
            if dead and self.broken is None:
                self.broken = dead
            if self.broken is not None:
                try:
                    self._restart()
                except RankSetupError as error:
                    raise RankFailed(f"the trainer ranks could not be restarted: {error}") from None
            self.steps += 1
            sync = DistributedSync(0, self.plan.world, self.device, lockstep=self.plan.shard_base)
            try:
                self.store.set(f"g{self.generation}/step/{self.steps}", "go")
                sync.comm(dist.broadcast_object_list, [header], src=0)
                return train(sync)
            except RankLost as error:
                raise self._lost(error) from None
            except RankFailed:
                raise
            except StepCancelled as error:  # raised where the ranks meet, so they can be told there
                try:
                    sync.abandon(error)
                except RankLost as lost:
                    raise self._lost(lost) from None
                raise
            except BaseException as error:
                try:
                    sync.abandon(error)
                except RankLost as lost:  # with a sharded base: the others wait inside a pass
                    raise self._lost(lost, here=True) from None
                raise

    def _lost(self, error: BaseException, here: bool = False) -> RankFailed:
        """`here`: the failure was this rank's own (rank 0), in a pass the others could not leave."""
        time.sleep(0.2)  # let a killed worker's exit status arrive
        what = self.lost() or (
            f"rank 0 failed inside a pass ({error})"
            if here
            else f"a rank stopped answering ({error}; --train-rank-timeout is {self.plan.rank_timeout_s:g} s)"
        )
        self.broken = what
        if self.plan.shard_base:
            # This process's sharded model belongs to the lost process group: it cannot train again.
            self._stop_workers()
            advice = (
                "the base model was sharded across the lost process group, so training needs a new one: restart "
                "the server (the same command) to train again; every model is at its last committed step and "
                "serving goes on"
            )
            self.fatal = f"a trainer rank was lost earlier ({what}): {advice}"
            return RankFailed(f"the step lost a trainer rank: {what}. The step was rolled back; {advice}")
        remote = self.plan.world > self.plan.local
        then = (
            f"; ranks on other machines must be started again: {self.plan.worker_command(self.plan.local)}"
            if remote
            else "; the server restarts its trainer ranks before the next step"
        )
        return RankFailed(f"the step lost a trainer rank: {what}. The step was rolled back{then}")
