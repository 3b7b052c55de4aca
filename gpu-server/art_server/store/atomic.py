"""Crash-safe writes: write to a temporary name, fsync, rename over the target, fsync the folder.
A reader (or a restart after kill -9) sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    write_bytes(path, (json.dumps(value, indent=2) + "\n").encode())


def write_jsonl(path: Path, rows: list[Any]) -> None:
    write_bytes(path, "".join(json.dumps(r) + "\n" for r in rows).encode())


def append_jsonl(path: Path, rows: list[Any]) -> None:
    """Appends whole lines and fsyncs; a line cut short by a crash is skipped by read_jsonl."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[Any]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the tail of a write interrupted by a crash
    return rows


def fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def publish_dir(tmp: Path, target: Path) -> None:
    """Makes a fully written folder appear at `target` in one rename."""
    fsync_tree(tmp)
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
    fsync_dir(target.parent)


def build_dir_once(target: Path, marker: str, fill: Callable[[Path], None]) -> Path:
    """`target`, built by `fill(tmp)` into a temporary folder beside it and renamed into place, unless
    it already holds `marker` (the file `fill` writes last). Two processes building it at once is
    harmless: the loser of the rename keeps the winner's folder, which is as good."""
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        fill(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / marker).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
