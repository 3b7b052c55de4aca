"""A fork on disk: a model takes over another model's checkpoint as one transaction.

The fork is built in `<model>/.fork/` (the parent's checkpoint folder without its trajectories, the
parent's history up to that step, the model's own model.json naming where it came from), committed
by writing `.fork/COMMITTED`, then moved into place. Before the commit nothing of the model has
changed; after it, `finish_fork` completes the move, here or on the next start (it is idempotent),
so a kill -9 at any point leaves either the fork or the model as it was."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ..core.faults import fail_once
from .atomic import fsync_dir, fsync_tree, read_jsonl, write_json, write_jsonl
from .checkpoints import STATE, TRAJECTORIES
from .layout import ModelPaths

FORK_DIR = ".fork"
REPLACED_DIR = ".fork-replaced"  # what the fork replaced, deleted once the fork is in place
COMMITTED = "COMMITTED"
# What a fork replaces. model.json is among them: it names the parent the model was forked from;
# reports (the trackers' cursors) start empty, as the history they follow is the fork's.
REPLACED = ("model.json", "checkpoints", "history.jsonl", "trajectories", "reports")


def history_until(rows: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The parent's history rows that describe its run up to checkpoint `step`: steps that trained
    into it and what was logged at it or before (a train row's `step` is the step it started from)."""
    return [r for r in rows if r.get("trained_into_step", r.get("step", 0) + (r.get("split") in ("train", "sft"))) <= step]


def build_fork(target: ModelPaths, parent: ModelPaths, step: int, origin: dict[str, Any]) -> None:
    """Builds and commits the fork of `parent`'s checkpoint `step` into `target`, then moves it into
    place (blocking). `origin` (project, name, step) is recorded in model.json and the checkpoint."""
    work = target.root / FORK_DIR
    shutil.rmtree(work, ignore_errors=True)  # an earlier fork that never committed
    try:
        folder = work / "checkpoints" / f"{step:04d}"
        # The trajectories a checkpoint holds are the parent's training data, not the fork's.
        shutil.copytree(parent.checkpoint(step), folder, ignore=shutil.ignore_patterns(TRAJECTORIES))
        state = json.loads((folder / STATE).read_text())
        write_json(folder / STATE, {**state, "forked_from": origin})
        write_jsonl(work / "history.jsonl", history_until(read_jsonl(parent.history), step))
        meta = json.loads(target.model_json.read_text())
        write_json(work / "model.json", {**meta, "forked_from": origin})
        (work / "trajectories").mkdir()
        (work / "reports").mkdir()
        fsync_tree(work)
        fail_once("exit_during_fork")
        write_json(work / COMMITTED, origin)  # the commit
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    fail_once("exit_after_fork_commit")
    finish_fork(target)


def finish_fork(target: ModelPaths) -> bool:
    """Completes a committed fork (moving it into place), or discards one that did not commit;
    True when a fork was completed. Safe to run again after a crash at any point inside it."""
    work, replaced = target.root / FORK_DIR, target.root / REPLACED_DIR
    if not work.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        return False
    if not (work / COMMITTED).exists():
        shutil.rmtree(work, ignore_errors=True)
        return False
    replaced.mkdir(exist_ok=True)
    for name in REPLACED:
        new, current = work / name, target.root / name
        if not new.exists():
            continue  # moved in already
        if current.exists():
            os.replace(current, replaced / name)
        os.replace(new, current)
    fsync_dir(target.root)
    shutil.rmtree(replaced, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return True
