"""The project's kernel speaks Jupyter's messaging protocol: jupyter_kernel_test (the Jupyter
project's conformance suite for kernels) with TypeScript samples, then what the suite does not
check: tracebacks at the cell's TypeScript lines, rich execute results, interrupting a long cell,
and a kernel started from outside the project (as VS Code starts it)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jupyter_kernel_test
import nbclient
import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[2]
KERNEL_NAME = "art-typescript"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class TestConformance(jupyter_kernel_test.KernelTests):
    """Every check of the suite that applies to a TypeScript kernel: all but the pager (IPython's `?`
    help payload, which has no TypeScript counterpart; inspection answers it) and the iopub welcome
    message (JEP 65, an XPUB socket that neither ipykernel nor JupyterLab requires)."""

    kernel_name = KERNEL_NAME
    language_name = "typescript"
    file_extension = ".ts"
    code_hello_world = 'console.log("hello, world")'
    code_stderr = 'console.error("to stderr")'
    completion_samples = [{"text": "Math.flo", "matches": {"floor"}}]
    complete_code_samples = ["1", "const x = 2;", "function f() {\n  return 1;\n}"]
    incomplete_code_samples = ["function f() {", "const xs = [1,", "if (true) {\n  f("]
    invalid_code_samples = ["const = ;", "let 1x = 2;", "a ++ +;"]
    code_generate_error = 'throw new Error("planned")'
    code_execute_result = [
        {"code": "6 * 7", "result": "42"},
        {"code": '"a" + "b"', "result": "'ab'"},
        {"code": "[1, 2].map((n) => n * 2)", "result": "[ 2, 4 ]"},
    ]
    code_display_data = [
        {"code": 'import * as tslab from "tslab";\ntslab.display.html("<b>bold</b>")', "mime": "text/html"},
        {"code": 'import { showTable } from "./lib/index";\nshowTable([{ a: 1 }])', "mime": "text/html"},
    ]
    code_history_pattern = "6 *"
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "Math.floor"
    code_clear_output = 'import { clearOutput } from "./lib/index";\nclearOutput();'

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # The samples that import lib/ would otherwise pay its first compile (seconds on 2 busy cores)
        # inside the suite's 15 s per message, which is there for the protocol, not for compiling.
        reply = cls.kc.execute_interactive('import { inNotebook } from "./lib/index";\ninNotebook()', timeout=180)
        assert reply["content"]["status"] == "ok", reply["content"]


@pytest.fixture(scope="module")
def kernel() -> Any:
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=120)
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client: Any, code: str, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The execute_reply content and the cell's IOPub messages (type and content)."""
    msg_id = client.execute(code)
    outputs = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        outputs.append({"type": msg["msg_type"], **msg["content"]})
    reply = client.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=timeout)
    return reply["content"], outputs


def error_of(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [o for o in outputs if o["type"] == "error"]
    assert len(errors) == 1, outputs
    return errors[0]


def plain(traceback: list[str]) -> str:
    return ANSI.sub("", "\n".join(traceback))


def test_a_thrown_error_names_itself_and_the_cells_typescript_lines(kernel: Any) -> None:
    _, client = kernel
    code = "const limit = 1;\n\n// a blank line and a comment above: JavaScript lines differ\nfunction check(x: number): void {\n  if (x > limit)\n    throw new RangeError(`too big: ${x}`);\n}\ncheck(5);"
    reply, outputs = run(client, code)
    error = error_of(outputs)
    assert reply["status"] == "error" and reply["ename"] == error["ename"] == "RangeError"
    assert reply["evalue"] == error["evalue"] == "too big: 5"
    assert reply["traceback"] == error["traceback"]
    text = plain(error["traceback"])
    count = reply["execution_count"]
    assert f"at check (Cell In[{count}], line 6)" in text, text
    assert f"at Cell In[{count}], line 8" in text, text
    assert "---->" in text and "throw new RangeError" in text
    assert "evalmachine" not in text and "tslab" not in text and "art-cell" not in text, text


def test_a_rejected_top_level_await_is_an_error_at_its_line(kernel: Any) -> None:
    _, client = kernel
    reply, outputs = run(
        client,
        'const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));\nawait wait(10);\nawait Promise.reject(new TypeError("rejected late"));',
    )
    error = error_of(outputs)
    assert (reply["ename"], reply["evalue"]) == ("TypeError", "rejected late")
    assert f"Cell In[{reply['execution_count']}], line 3" in plain(error["traceback"])


def test_a_type_error_is_an_error_at_its_line_and_column(kernel: Any) -> None:
    _, client = kernel
    reply, outputs = run(client, 'const ok = 1;\n\nconst n: number = "seven";')
    error = error_of(outputs)
    assert reply["ename"] == "TSError"
    assert (
        f"Cell In[{reply['execution_count']}], line 3" in reply["evalue"] and "not assignable to type 'number'" in reply["evalue"]
    )
    caret = [line for line in plain(error["traceback"]).split("\n") if line.strip() == "^"]
    source = [line for line in plain(error["traceback"]).split("\n") if "---->" in line]
    assert caret and source and source[0].index("const n") + len("const ") == caret[0].index("^"), error["traceback"]


def test_a_cells_value_is_its_execute_result_and_rich_objects_show_their_bundle(kernel: Any) -> None:
    _, client = kernel
    reply, outputs = run(
        client, 'console.log("a stream");\n({ [Symbol.for("Jupyter.display")]: () => ({ "text/html": "<i>rich</i>" }) })'
    )
    results = [o for o in outputs if o["type"] == "execute_result"]
    assert len(results) == 1 and results[0]["execution_count"] == reply["execution_count"], outputs
    assert results[0]["data"]["text/html"] == "<i>rich</i>" and "text/plain" in results[0]["data"]
    assert [o["text"] for o in outputs if o["type"] == "stream"] == ["a stream\n"]
    # A trajectory has its own rich view.
    _, outputs = run(
        client,
        'import { Trajectory } from "./lib/index";\n'
        'const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "hi" }], reward: 1 });\nt',
    )
    data = next(o for o in outputs if o["type"] == "execute_result")["data"]
    assert "text/html" in data and "hi" in data["text/html"], data
    # So do the project's charts and tables; a chart already drawn (plotHistory) is one line of text, not a second chart.
    rows = '[{ step: 1, split: "train", reward: 0.2 }, { step: 2, split: "train", reward: 0.6 }]'
    _, outputs = run(client, f'import {{ historyFigure, historyFrame, plotHistory }} from "./lib/index";\nhistoryFigure({rows})')
    data = next(o for o in outputs if o["type"] == "execute_result")["data"]
    assert data["application/vnd.plotly.v1+json"]["data"][0]["y"] == [0.2, 0.6], data
    _, outputs = run(client, f"plotHistory({rows})")
    assert [o["type"] for o in outputs if o["type"] in ("display_data", "execute_result")] == [
        "display_data",
        "execute_result",
    ], outputs
    assert list(outputs[-1]["data"]) == ["text/plain"] and outputs[-1]["data"]["text/plain"].startswith("<plotly figure"), (
        outputs[-1]
    )
    _, outputs = run(client, f"await historyFrame({rows})", timeout=120)
    data = next(o for o in outputs if o["type"] == "execute_result")["data"]
    assert 'class="art-table"' in data["text/html"] and "0.600" in data["text/plain"], data


def test_an_error_aborts_the_cells_queued_behind_it_and_the_kernel_goes_on(kernel: Any) -> None:
    _, client = kernel
    first = client.execute('throw new Error("stop here")')
    second = client.execute('console.log("must not run")')
    replies = {}
    while len(replies) < 2:
        msg = client.get_shell_msg(timeout=60)
        if msg["parent_header"].get("msg_id") in (first, second):  # not a late kernel_info_reply of the start
            replies[msg["parent_header"]["msg_id"]] = msg["content"]["status"]
    assert (replies[first], replies[second]) == ("error", "aborted")
    reply, outputs = run(client, "1 + 1")
    assert reply["status"] == "ok" and outputs[-1]["data"]["text/plain"] == "2"


@pytest.mark.parametrize("long_cell", ["while (true) {}", "await new Promise(() => {})"])
def test_interrupt_ends_a_long_cell_within_a_second_and_the_kernel_stays_usable(kernel: Any, long_cell: str) -> None:
    manager, client = kernel
    run(client, "let survivor = 41;")
    msg_id = client.execute(long_cell)
    while True:  # the cell has started
        msg = client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
    time.sleep(0.5)
    interrupted = time.monotonic()
    manager.interrupt_kernel()
    reply = client.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=30)
    took = time.monotonic() - interrupted
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    assert took < 1.0, f"the interrupt took {took:.2f} s"
    reply, outputs = run(client, "survivor + 1")
    assert outputs[-1].get("data", {}).get("text/plain") == "42", outputs


def test_a_kernel_started_outside_the_project_imports_art_ts_and_draws_a_chart(tmp_path: Path) -> None:
    """As VS Code starts it: from the kernelspec the project's venv lists, in another working folder."""
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter", "kernelspec", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"^\s*{KERNEL_NAME}\s", listed, re.M), listed
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME, cwd=str(tmp_path), startup_timeout=120)
    try:
        reply, outputs = run(
            client,
            'import { showPlotly } from "./lib/index";\n'
            'showPlotly({ data: [{ type: "scatter", y: [1, 3, 2] }], layout: { title: { text: "from outside" } } });',
            timeout=120,
        )
        assert reply["status"] == "ok", reply
        assert any(o["type"] == "display_data" and "application/vnd.plotly.v1+json" in o["data"] for o in outputs), outputs
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_nbclient_stops_at_a_failed_cell_and_its_error_names_the_exception_and_the_line() -> None:
    """What every headless runner (nbclient, nbconvert, papermill) shows of a failed cell."""
    cells = ["const a = 1;", "const b = 2;\nthrow new RangeError(`out of range: ${a + b}`);", 'console.log("not reached")']
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=120)
    with pytest.raises(nbclient.exceptions.CellExecutionError) as caught:
        client.execute()
    message = ANSI.sub("", str(caught.value))
    assert "RangeError: out of range: 3" in message and "Cell In[2], line 2" in message, message
    [error] = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert (error.ename, error.evalue) == ("RangeError", "out of range: 3")
    assert nb.cells[2].execution_count is None and not nb.cells[2].outputs, "the cell after the error ran"


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc (Linux)")
def test_a_restart_leaves_no_server_process_behind(tmp_path: Path) -> None:
    """Kernel > Restart sends shutdown_request(restart=True): the kernel exits, and the gpu-server its
    cells started goes with it."""
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=120)
    try:
        reply, outputs = run(
            client,
            'import { LocalBackend } from "./lib/index";\n'
            f'const backend = await LocalBackend.start({{ baseModel: "builtin:tiny", dataDir: {str(tmp_path)!r} }});\n'
            "[process.pid, backend.pid]",
            timeout=180,
        )
        assert reply["status"] == "ok", reply
        kernel_pid, server_pid = (int(n) for n in re.findall(r"\d+", outputs[-1]["data"]["text/plain"]))
        assert _alive(kernel_pid) and _alive(server_pid)
        manager.restart_kernel(now=False)
        deadline = time.monotonic() + 15
        while (_alive(server_pid) or _alive(kernel_pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(kernel_pid), "the old kernel process is still running"
        assert not _alive(server_pid), "the gpu-server started by the old kernel is still running"
        # As a front end does after a restart: wait until the new kernel answers and its IOPub
        # messages arrive (a subscriber reconnecting to the new kernel misses what it sent before).
        client.wait_for_ready(timeout=120)
        reply, outputs = run(client, "40 + 2")  # a new kernel answers: its first cell
        assert (reply["status"], reply["execution_count"], outputs[-1]["data"]["text/plain"]) == ("ok", 1, "42"), outputs
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
