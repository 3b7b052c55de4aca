"""Rewrites every committed notebook in the form JupyterLab saves (nbformat's own writer: sorted
keys, one-space indent), so opening and saving one in Lab leaves no diff. Run after editing a
notebook by any other means: .venv/bin/python scripts/format-notebooks.py"""

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".artifacts", "node_modules", ".venv", ".art", ".git", ".exp"}

for path in sorted(ROOT.glob("**/*.ipynb")):
    if SKIP & set(path.relative_to(ROOT).parts):
        continue
    text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    rewritten = nbformat.writes(nb)
    if not rewritten.endswith("\n"):
        rewritten += "\n"
    if rewritten != text:
        path.write_text(rewritten, encoding="utf-8")
        print(f"rewrote {path.relative_to(ROOT)}")
