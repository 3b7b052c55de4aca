"""A trainer rank other than 0: `python -m art_server.trainer.rank_worker`, with torchrun's variables
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the server sets them for the ranks it starts; on
another machine, set them by hand or let torchrun do it). It joins rank 0's store (ranks.py), then
runs each step it is sent on its shard (parallel.py) until rank 0 says stop or goes away.

It keeps no training state between steps: each step brings rank 0's adapter weights and LoRA
config, so a restarted worker (or one that missed a rolled-back step) starts every step identical
to rank 0. It loads the base model on its first step, from the path rank 0 names (or --model)."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

import torch

from .. import __version__
from ..core.faults import take_once
from ..core.process import die_with_parent
from .grpo import train_step
from .guard import StepGuard
from .lora import LoraHost
from .parallel import DistributedSync, RankFailed, RankLost
from .ranks import IDLE_WAIT
from .sft import train_sft
from .sharding import shard_base

CHECK_EVERY = datetime.timedelta(seconds=5)  # how often an idle rank checks that rank 0 still wants it

log = logging.getLogger("art_server.rank")


class Holder:
    """The base model of this rank (what LoraHost trains on)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.model: Any = None
        self.source: tuple[str, str, bool] | None = None

    def load(self, path: str, dtype: str, shard: bool) -> None:
        from transformers import AutoModelForCausalLM

        if self.source == (path, dtype, shard):
            return
        started = datetime.datetime.now()
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), local_files_only=True)
        self.model = model.to(self.device)  # pyright: ignore[reportArgumentType]  (transformers' stubs type .to() oddly)
        self.model.eval()
        if shard:
            shard_base(self.model)
        self.source = (path, dtype, shard)
        log.info("loaded %s (%s) in %.1f s", path, dtype, (datetime.datetime.now() - started).total_seconds())


def end_with_server() -> None:
    """A worker the server started ends with it, kill -9 included."""
    parent = os.environ.get("ART_RANK_PARENT")
    if not parent:
        return
    die_with_parent(signal.SIGKILL)
    if os.getppid() != int(parent):
        os._exit(1)  # the server died before the request took effect


def join(store: Any, rank: int, device: str) -> dict[str, Any]:
    """Announces this rank for the current generation and returns rank 0's verdict."""
    generation = store.get("generation").decode()
    prefix = f"g{generation}/"
    version = "0.0.0-mismatch" if take_once("rank_version_mismatch") else __version__
    store.set(
        f"{prefix}joined/{rank}",
        json.dumps(
            {"version": version, "torch": torch.__version__, "pid": os.getpid(), "host": socket.gethostname(), "device": device}
        ),
    )
    store.wait([f"{prefix}verdict"], IDLE_WAIT)
    return {"prefix": prefix, **json.loads(store.get(f"{prefix}verdict"))}


def next_word(store: Any, key: str, prefix: str) -> str | None:
    """Waits for rank 0's word for the next step ("go" or "stop"); None when this rank should leave:
    rank 0 is gone, or it restarted the ranks without this one (a new generation)."""
    while True:
        try:
            store.wait([key], CHECK_EVERY)
            return store.get(key).decode()
        except Exception:  # a timeout, or rank 0 gone
            pass
        try:
            generation = store.get("generation").decode()
        except Exception:
            log.info("rank 0 is gone; exiting")
            return None
        if f"g{generation}/" != prefix:
            log.warning(
                "rank 0 restarted the trainer ranks (generation %s); exiting: start this rank again to rejoin", generation
            )
            return None


def run_step(header: dict[str, Any], holder: Holder, host: LoraHost, sync: DistributedSync, model_override: str | None) -> None:
    holder.load(model_override or header["base_path"], header["dtype"], header["shard_base"])
    slot = header["slot"]
    if host.has_slot(slot) and host.config(slot).to_dict() != header["lora"].to_dict():
        host.delete_slot(slot)
    if not host.has_slot(slot):
        host.add_slot(slot, header["lora"])
    host.load_weights(slot, header["weights"])
    # The adapters of the model's other steps that the step scores with (service/step_adapters.py):
    # the KL penalty's reference, and the steps behind that sampled truncated turns.
    others = [header["ref"]] if header.get("ref") else []
    others += list((header.get("behind") or {}).values())
    for old in [s for s in host.slots() if s.startswith("behind") and s not in {o[0] for o in others}]:
        host.delete_slot(old)  # an earlier step's that this step does not score with (as rank 0 frees it)
    for other_slot, other_weights in others:
        if not host.has_slot(other_slot):
            host.add_slot(other_slot, header["lora"])
        host.load_weights(other_slot, other_weights)
    ref_slot = header["ref"][0] if header.get("ref") else None
    behind = {step: loaded[0] for step, loaded in (header.get("behind") or {}).items()}
    host.activate(slot)
    if header["kind"] == "grpo":
        prepared, config, pad_id = header["args"]
        train_step(host, slot, None, prepared, config, pad_id, guard=StepGuard(), sync=sync, ref_slot=ref_slot, behind=behind)
    else:
        sequences, config, pad_id = header["args"]
        train_sft(host, slot, None, sequences, config, pad_id, guard=StepGuard(), sync=sync)


def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist

    p = argparse.ArgumentParser(prog="art-server rank", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--device",
        default="auto",
        help="this rank's device: cpu, cuda:<i>, or auto (cuda:$LOCAL_RANK with "
        "CUDA, as torchrun numbers a node's processes, else cpu)",
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads for this rank (0: torch's default)")
    p.add_argument("--cores", default="", help="pin this rank to CPU cores, e.g. 2-3 (threads: one per core)")
    p.add_argument("--model", default=None, help="the base model's folder on this machine (default: rank 0's path)")
    a = p.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level="INFO", format=f"%(asctime)s %(levelname)s rank {os.environ.get('RANK', '?')}: %(message)s"
    )
    end_with_server()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        sys.exit(
            f"art-server rank: set {', '.join(missing)} (torchrun's variables: this rank, the number of ranks, "
            "and rank 0's --train-master-addr and port)"
        )
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if a.cores:
        first, _, last = a.cores.partition("-")
        cores = range(int(first), int(last or first) + 1)
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(a.threads or len(cores))
    elif a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "auto":
        a.device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False, timeout=datetime.timedelta(seconds=60)
        )
    except Exception as error:
        sys.exit(
            f"art-server rank {rank}: cannot reach rank 0 at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} ({error})"
        )
    verdict = join(store, rank, a.device)
    if not verdict["ok"]:
        sys.exit(f"art-server rank {rank}: rank 0 refused this rank: {verdict['reason']}")
    dist.init_process_group(
        verdict["backend"],
        store=dist.PrefixStore(verdict["prefix"] + "pg/", store),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=verdict["rank_timeout_s"]),
    )
    log.info("joined as rank %d of %d (%s, %s, %d threads)", rank, world, verdict["backend"], a.device, torch.get_num_threads())
    holder = Holder(device)
    host = LoraHost(holder)
    host.threads = torch.get_num_threads()
    step = 0
    while True:
        step += 1
        key = f"{verdict['prefix']}step/{step}"
        word = next_word(store, key, verdict["prefix"])
        if word is None:
            break
        if word == "stop":
            break
        sync = DistributedSync(rank, world, device, lockstep=verdict.get("shard_base", False))
        try:
            header: list[Any] = [None]
            sync.comm(dist.broadcast_object_list, header, src=0)
            fault = take_once(f"rank{rank}_step_error")
            if take_once(f"rank{rank}_exit"):
                os._exit(137)
            if fault:
                raise RuntimeError(f"injected fault on rank {rank}")
            run_step(header[0], holder, host, sync, a.model)
        except RankLost as error:
            log.error("lost the other ranks: %s; exiting", error)
            sys.exit(1)
        except RankFailed as error:
            log.warning("step %d stopped: %s", step, error)
        except Exception as error:
            log.exception("step %d failed on this rank", step)
            try:
                sync.abandon(error)
            except RankLost:  # the group is lost (or, with a sharded base, cannot be told): leave it
                os._exit(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
