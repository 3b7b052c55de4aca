"""Every notebook, executed headlessly by real Jupyter (nbclient) with the project's tslab kernel.

`ART_SMOKE=1` tells each notebook's parameters cell to take its short configuration. The executed
copies are written to `.artifacts/notebooks/` (also when a cell fails), so a failure can be opened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import nbclient
import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[2]
KERNEL_NAME = "art-typescript"
OUT_DIR = ROOT / ".artifacts" / "notebooks"
CELL_TIMEOUT_S = int(os.environ.get("ART_NOTEBOOK_CELL_TIMEOUT", "600"))


# Run in JupyterLab by tests/ts/lab/lab-notebook.test.ts (Run All in headless Chromium, reading what
# the page shows), so not executed a second time here.
RUN_IN_LAB = {"tictactoe.ipynb", "bring-your-own-agent.ipynb"}


def notebook_paths() -> list[Path]:
    """The cookbook (notebooks/, without committed results and those run in Lab) and the test notebooks."""
    product = sorted(p for p in (ROOT / "notebooks").glob("*.ipynb") if p.name not in RUN_IN_LAB)
    checks = sorted((ROOT / "tests" / "notebooks").glob("*.ipynb"))
    return product + checks


def executed_path(source: Path) -> Path:
    return OUT_DIR / source.name


_executed: dict[tuple, nbformat.NotebookNode] = {}


def execute(source: Path, env: dict[str, str] | None = None, through: str | None = None) -> nbformat.NotebookNode:
    """Runs a notebook top to bottom (once per test session and environment); raises AssertionError
    naming the notebook, the cell and the error. `env` adds variables for this run's kernel;
    `through` stops after the first code cell whose source holds it."""
    key = (source, tuple(sorted((env or {}).items())), through)
    if key in _executed:
        return _executed[key]
    nb = nbformat.read(source, as_version=4)
    if through is not None:
        last = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and through in c.source)
        nb.cells = nb.cells[: last + 1]
    os.environ["ART_SMOKE"] = "1"  # inherited by the kernel process
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    client = nbclient.NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(source.parent)}},
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        index, cell = next(
            ((i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and _failed(c)),
            (None, None),
        )
        where = f"cell {index + 1} (id {cell.get('id')})" if cell is not None else "a cell"
        raise AssertionError(f"{source.relative_to(ROOT)}: {where} failed:\n{error}") from None
    except TimeoutError as error:
        raise AssertionError(f"{source.relative_to(ROOT)}: a cell ran past {CELL_TIMEOUT_S} s: {error}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        nbformat.write(nb, executed_path(source) if not env else OUT_DIR / f"{source.stem}-env{source.suffix}")
    _executed[key] = nb
    return nb


def _failed(cell: nbformat.NotebookNode) -> bool:
    # tslab reports a thrown error only on stderr; nbclient stops at the failing cell, so the last
    # code cell with stderr output (or without an execution count) is the one that failed.
    return any(o.get("output_type") == "error" or o.get("name") == "stderr" for o in cell.get("outputs", []))


@pytest.mark.parametrize("source", notebook_paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_runs_headlessly_in_smoke_configuration(source: Path) -> None:
    nb = execute(source)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells, f"{source.name} has no code cells"


def outputs_of(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_kernel_check_shows_plotly_bundle_with_html_fallback_and_no_copy_of_plotly_js() -> None:
    nb = execute(ROOT / "tests" / "notebooks" / "kernel-check.ipynb")
    charts = [o for o in outputs_of(nb) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(charts) == 1, f"expected one plotly output, found {len(charts)}"
    data = charts[0]["data"]
    figure = data["application/vnd.plotly.v1+json"]
    assert figure["data"][0]["type"] == "scatter" and len(figure["data"][0]["y"]) == 20
    html = data["text/html"]
    assert 'class="art-plotly"' in html and "Plotly.newPlot" in html
    # The page loads plotly.js from the Jupyter server; no output carries the 4.8 MB library.
    assert '"static/plotly.min.js"' in html
    all_html = "".join(o.get("data", {}).get("text/html", "") for o in outputs_of(nb))
    assert "plotly.js v" not in all_html, "a notebook output carries a copy of plotly.js"
    assert len(nbformat.writes(nb)) < 200_000, f"the executed kernel-check notebook is {len(nbformat.writes(nb))} bytes"


def test_kernel_check_table_and_progress_line_render_in_place() -> None:
    nb = execute(ROOT / "tests" / "notebooks" / "kernel-check.ipynb")
    outputs = outputs_of(nb)
    tables = [o for o in outputs if 'class="art-table"' in o.get("data", {}).get("text/html", "")]
    assert tables and "reward" in tables[0]["data"]["text/plain"]
    progress = [o for o in outputs if 'class="art-progress"' in o.get("data", {}).get("text/html", "")]
    # Ten updates and a finish land in one output, replaced in place, showing the final state.
    assert len(progress) == 1, f"expected one progress output, found {len(progress)}"
    assert progress[0]["data"]["text/plain"] == "counting [####################] 10/10 100% value 100"


def test_kernel_resolves_lib_from_the_project_root() -> None:
    nb = execute(ROOT / "tests" / "notebooks" / "kernel-check.ipynb")
    # The cell ends with `process.cwd()`: its value is the cell's Out[n] (an execute_result), not a stream.
    results = [o for o in outputs_of(nb) if o.get("output_type") == "execute_result"]
    assert any(o["data"]["text/plain"] == f"'{ROOT}'" for o in results), results
    assert all(o.get("execution_count") for o in results), results


def test_kernel_keeps_compiling_when_files_change_between_cells() -> None:
    """A file changing where TypeScript looked for a module (a package.json in node_modules, as an
    `npm install` rewrites it; a module file appearing) used to break tslab for good: every later
    cell failed with "Unexpected pending rebuildTimer". kernel/compile-timers.cjs fixes that; a
    module that failed to resolve must still resolve once its file exists."""
    scratch = ROOT / ".artifacts" / "kernel-churn"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    cells = [
        'import { generateText } from "ai";\nimport { notebookParams } from "./lib/index";\nconsole.log("first", typeof generateText, typeof notebookParams);',
        'import { late } from "./.artifacts/kernel-churn/late";\nconsole.log(late);',
        'const touched: number = 2;\nconsole.log("second", touched);',
        'import { late } from "./.artifacts/kernel-churn/late";\nconsole.log("late", late);',
        'console.log("third", typeof notebookParams);',
    ]
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME, cwd=str(ROOT))

    def run(code: str) -> str:
        """Executes one cell; returns what it printed (stdout and stderr)."""
        msg_id = client.execute(code)
        text = ""
        while True:
            message = client.get_iopub_msg(timeout=120)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                text += message["content"]["text"]
            if message["msg_type"] == "error":
                text += "\n".join(message["content"].get("traceback") or [message["content"].get("evalue", "")])
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return text

    def churn() -> None:
        for package in ("ai", "openai"):  # same bytes, a new file: what an `npm install` does to it
            manifest = ROOT / "node_modules" / package / "package.json"
            fresh = manifest.with_name(f".package.json.{os.getpid()}")
            fresh.write_bytes(manifest.read_bytes())
            os.replace(fresh, manifest)
        time.sleep(1.5)  # TypeScript's watchers report within ~0.5 s

    text = []
    try:
        for index, code in enumerate(cells):
            if index == 3:
                (scratch / "late.ts").write_text('export const late = "found";\n')
                time.sleep(1.5)
            text.append(run(code))
            time.sleep(0.5)  # tslab aborts requests that arrive within 200 ms of a failed cell
            if index in (0, 2):
                churn()
        # JupyterLab asks every kernel for its history; tslab used to leave that unanswered.
        history = client.history(reply=True, timeout=10)
        assert history["msg_type"] == "history_reply" and history["content"]["status"] == "ok", history
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "first function function" in text[0], text[0]
    assert "Cannot find module" in text[1], text[1]
    for index, expected in ((2, "second 2"), (3, "late found"), (4, "third function")):
        assert expected in text[index], f"cell {index + 1} after files changed: {text[index]!r}"
    assert "rebuildTimer" not in "".join(text)


COOKBOOK = ["tictactoe.ipynb", "2048.ipynb", "codenames.ipynb", "sft-then-rl.ipynb", "bring-your-own-agent.ipynb", "mcp-rl.ipynb"]


def plotly_traces(nb: nbformat.NotebookNode) -> list[str]:
    """`split/metric` of every plotted trace, from each output's plotly bundle (the last state of a
    chart redrawn in place is what the saved notebook holds)."""
    return [
        f"{trace['meta']['split']}/{trace['meta']['metric']}" if "meta" in trace else trace.get("name", "")
        for o in outputs_of(nb)
        for trace in o.get("data", {}).get("application/vnd.plotly.v1+json", {}).get("data", [])
    ]


@pytest.mark.parametrize("name", COOKBOOK)
def test_cookbook_notebook_has_a_parameters_cell_a_reward_cell_and_a_gpu_section(name: str) -> None:
    source = ROOT / "notebooks" / name
    assert source.exists(), f"notebooks/{name} is missing"
    nb = nbformat.read(source, as_version=4)
    text = "".join(c.source for c in nb.cells)
    assert "notebookParams(" in text and "ART_SMOKE" in text, f"{name}: no parameters cell"
    assert "tweak this cell" in text, f"{name}: no marked reward cell"
    assert "On a GPU" in text, f"{name}: no GPU section"
    assert "await backend.close()" not in "".join(c.source for c in nb.cells if c.cell_type == "code"), (
        f"{name}: a cell closes the backend, so re-running the training cell would fail"
    )


@pytest.mark.parametrize("name", [n for n in COOKBOOK if n not in RUN_IN_LAB])
def test_cookbook_run_plots_the_reward_and_writes_no_error(name: str) -> None:
    nb = execute(ROOT / "notebooks" / name)
    traces = plotly_traces(nb)
    assert any(t.endswith("reward") for t in traces), f"{name}: no reward trace in its plots ({traces})"
    streams = "".join(o.get("text", "") for o in outputs_of(nb) if o.get("output_type") == "stream" and o.get("name") == "stderr")
    assert "Error" not in streams, f"{name}: a cell wrote an error:\n{streams[-2000:]}"
    # Advice (flat groups, server warnings) is a styled note in a notebook, not a red stderr box.
    assert "[art]" not in streams, f"{name}: a notice went to stderr:\n{streams[-2000:]}"


@pytest.mark.parametrize("name", [n for n in COOKBOOK if n not in RUN_IN_LAB])
def test_cookbook_run_shows_its_verdict_with_an_interval_and_writes_it(name: str) -> None:
    """The evaluation cell prints the trained score's 95% interval against the baselines and writes
    the run's results; a smoke run writes them under .art/results, never over notebooks/results."""
    nb = execute(ROOT / "notebooks" / name)
    stem = Path(name).stem
    written = json.loads((ROOT / ".art" / "results" / f"{stem}.json").read_text())
    streams = "".join(o.get("text", "") for o in outputs_of(nb) if o.get("output_type") == "stream")
    verdict = f"trained {written['metric']} {written['trained']:.3f}, 95% interval {written['trainedInterval95'][0]:.3f} to"
    assert verdict in streams, f"{name}: no verdict line {verdict!r} in:\n{streams[-2000:]}"
    assert written["notebook"] == stem and written["smoke"] is True
    assert set(written) >= {
        "metric",
        "evalGames",
        "untrained",
        "trained",
        "trainedInterval95",
        "baselines",
        "wallSeconds",
        "machine",
        "seed",
    }
    assert written["baselines"] and written["evalGames"] >= 2


def test_committed_cookbook_notebooks_have_no_outputs() -> None:
    for name in COOKBOOK:
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
        assert not dirty, f"notebooks/{name}: cells {dirty} carry outputs; full runs go to notebooks/results/"


def committed_notebooks() -> list[Path]:
    return sorted(
        p
        for p in ROOT.glob("**/*.ipynb")
        if not any(part in {".artifacts", "node_modules", ".venv", ".art", ".git", ".exp"} for part in p.relative_to(ROOT).parts)
    )


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_notebook_is_stored_as_nbformat_writes_it(path: Path) -> None:
    """JupyterLab saves through nbformat: a notebook stored any other way changes when opened and saved."""
    text = path.read_text(encoding="utf-8")
    rewritten = nbformat.writes(nbformat.reads(text, as_version=nbformat.NO_CONVERT))
    if not rewritten.endswith("\n"):
        rewritten += "\n"
    assert text == rewritten, f"{path.relative_to(ROOT)} is not in nbformat's written form: run scripts/format-notebooks.py"


@pytest.mark.parametrize("name", ["2048.ipynb", "sft-then-rl.ipynb"])
def test_git_stores_a_run_notebook_as_committed(name: str) -> None:
    """A notebook run in Lab keeps its outputs in the file; git's clean filter (nbstripout, from
    .gitattributes and the set-up's .git/config) must turn the run file back into the committed one,
    byte for byte, so `git diff` shows nothing."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git clone: there is no git to store notebooks")
    source = ROOT / "notebooks" / name
    nb = execute(source)
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the run left no outputs to strip"
    git = ["git", "-C", str(ROOT)]
    attribute = subprocess.run([*git, "check-attr", "filter", f"notebooks/{name}"], capture_output=True, text=True, check=True)
    assert attribute.stdout.strip().endswith("filter: nbstripout"), attribute.stdout
    clean = subprocess.run([*git, "config", "--get", "filter.nbstripout.clean"], capture_output=True, text=True)
    assert clean.returncode == 0, "the nbstripout filter is not defined: run npm run setup"
    stripped = subprocess.run(
        clean.stdout.strip(), shell=True, input=nbformat.writes(nb) + "\n", capture_output=True, text=True, check=True
    )
    assert stripped.stdout == source.read_text(encoding="utf-8"), f"the filter does not restore notebooks/{name}"
    # and git itself, through .gitattributes: the run file hashes to the committed blob
    run_copy = ROOT / "notebooks" / f".{source.stem}-run-{os.getpid()}.ipynb"
    try:
        run_copy.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
        hashed = subprocess.run(
            [*git, "hash-object", "--path", f"notebooks/{name}", str(run_copy)], capture_output=True, text=True, check=True
        )
    finally:
        run_copy.unlink(missing_ok=True)
    committed = subprocess.run([*git, "hash-object", str(source)], capture_output=True, text=True, check=True)
    assert hashed.stdout == committed.stdout


def test_sft_then_rl_draws_both_phases_and_rl_alone_on_one_curve() -> None:
    nb = execute(ROOT / "notebooks" / "sft-then-rl.ipynb")
    traces = plotly_traces(nb)
    assert "SFT then RL val/reward" in traces and "RL alone val/reward" in traces, traces


def test_bring_your_own_agent_captures_its_calls_through_a_rollout() -> None:
    """Its run (tools listed, captured turns drawn with their tokens) is checked in Lab."""
    nb = nbformat.read(ROOT / "notebooks" / "bring-your-own-agent.ipynb", as_version=4)
    code = "".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "model.rollout" in code or "chat.rollout" in code, "the notebook captures through a rollout"
    assert ".push(" not in code, "the agent's calls are captured, never pushed"


def test_codenames_checks_clues_against_the_shipped_fallback_dictionary_when_told_to() -> None:
    fallback = ROOT / "notebooks" / "data" / "dictionary-fallback.txt"
    # Only the cells up to the one that loads the dictionary: the rest of the notebook runs in the smoke test.
    nb = execute(ROOT / "notebooks" / "codenames.ipynb", {"ART_DICTIONARY": str(fallback)}, through="SYSTEM_DICTIONARY")
    streams = "".join(o.get("text", "") for o in outputs_of(nb) if o.get("output_type") == "stream")
    assert f"dictionary {fallback}" in streams, streams[:2000]
    words = fallback.read_text().split()
    assert len(words) > 30_000 and {"ocean", "music", "wave"} <= set(words)


@pytest.mark.needs("vllm")
def test_tictactoe_trains_through_real_vllm_in_smoke_configuration() -> None:
    """The same notebook with `ART_ENGINE=vllm`: vLLM's CPU build serves the rollouts and hot-loads
    each step (npm test sets it up), and the trainer's logprobs match what vLLM sampled with."""
    nb = execute(ROOT / "notebooks" / "tictactoe.ipynb", {"ART_ENGINE": "vllm"})
    streams = "".join(o.get("text", "") for o in outputs_of(nb) if o.get("output_type") == "stream")
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in outputs_of(nb))  # the parameters table
    assert re.search(r"engine +vllm +ART_ENGINE", shown), shown[:2000]
    data_dir = Path(re.search(r"local gpu-server \(pid \d+\) on (\S+);", streams).group(1))
    vllm_log = (data_dir / "logs" / "vllm.log").read_text()
    assert re.search(r"Loaded new LoRA adapter: name '[^']+@1'", vllm_log), vllm_log[-3000:]  # step 1, hot-loaded
    rows = [json.loads(line) for history in data_dir.glob("**/history.jsonl") for line in history.read_text().splitlines()]
    trained = [r for r in rows if r.get("kind") == "grpo" and r.get("tokens_trained")]
    assert trained, rows
    for row in trained:  # bf16 on this CPU: a real mismatch, corrected (the ratio starts at 1)
        assert row["sampler_logprob_diff_mean"] < 0.5 and abs(row["importance_ratio_mean"] - 1) < 1e-6, row
