"""The server's layers (pyproject.toml's [tool.importlinter]): no module imports a layer above its
own, imports inside functions included, and the two engines do not import each other. The checker is
import-linter; the second test proves it sees an upward import, in a copy of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SERVER = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    # Run in `root`, with `root` first on the path, so the package checked is the one there.
    return subprocess.run(
        [*LINT, "--no-cache"], cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": ""}, timeout=120
    )


def test_every_import_points_down_the_layers() -> None:
    result = lint(SERVER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_the_check_fails_on_an_import_inside_a_function_that_points_up(tmp_path: Path) -> None:
    shutil.copytree(SERVER / "art_server", tmp_path / "art_server", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SERVER / "pyproject.toml", tmp_path / "pyproject.toml")
    names = tmp_path / "art_server" / "core" / "names.py"
    names.write_text(names.read_text() + "\n\ndef _upward() -> None:\n    from ..api import app  # noqa: F401\n")
    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "art_server.core.names -> art_server.api.app" in result.stdout
