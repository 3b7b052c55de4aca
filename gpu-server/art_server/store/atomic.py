"""Crash-safe writes: write to a temporary name, fsync, rename over the target, fsync the folder.
A reader (or a restart after kill -9) sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.faults import fail_once


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
    """Makes a fully written and synced folder appear at `target` in one rename."""
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
    fsync_dir(target.parent)


def link_or_copy(source: Path, target: Path) -> None:
    """`target` becomes `source`'s content, atomically: a hard link (no second copy on disk), or a copy
    where the file system has no hard links."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    fsync_dir(target.parent)


# The temporary folder of a build names its builder's pid, so a later start can tell an abandoned
# one (its builder died, e.g. kill -9) from one another process is still filling.
_BUILD_TMP = re.compile(r"\..+\.build-(\d+)-[^/]*")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_abandoned_builds(folder: Path, owned: bool = False) -> list[str]:
    """Removes the temporary build folders in `folder` whose builder process is gone; `owned`: this
    process alone builds there (a folder of its locked data dir), so every hidden folder is one."""
    removed = []
    if folder.is_dir():
        for child in folder.iterdir():
            found = _BUILD_TMP.fullmatch(child.name)
            abandoned = found and int(found.group(1)) != os.getpid() and not _alive(int(found.group(1)))
            if child.is_dir() and (abandoned or (owned and child.name.startswith("."))):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
    return removed


def build_dir_once(target: Path, marker: str, fill: Callable[[Path], None]) -> Path:
    """`target`, built by `fill(tmp)` into a temporary folder beside it and renamed into place, unless
    it already holds `marker` (the file `fill` writes last). Two processes building it at once is
    harmless: the loser of the rename keeps the winner's folder, which is as good. Folders of builds
    whose process died are removed first."""
    sweep_abandoned_builds(target.parent)
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-{os.getpid()}-", dir=target.parent))
    try:
        fill(tmp)
        fail_once("exit_during_build")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / marker).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
