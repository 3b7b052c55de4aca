// The kernel layer (kernel/*.cjs) piece by piece, and what it takes from tslab 1.0 (unmaintained, so
// pinned by these checks: an update that changes one of them fails here, naming it). The protocol end
// to end (jupyter_kernel_test, tracebacks, interrupt, restart) is tests/notebooks/test_kernel_protocol.py.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT } from "../support/helpers";

const kernel = (name: string): unknown => require(path.join(ROOT, "kernel", name));
const tslabDir = path.dirname(require.resolve("tslab/package.json"));
const ts = require(require.resolve("@tslab/typescript-for-tslab", { paths: [tslabDir] })) as { version: string };

type Reply = { status: string; history?: unknown[]; indent?: string };

describe("what the kernel takes from tslab", () => {
  it("the modules and functions kernel/server.cjs calls", () => {
    const need: Array<[string, string]> = [["tslab/dist/converter", "createConverter"], ["tslab/dist/executor", "createExecutor"],
      ["tslab/dist/inspect", "printQuickInfo"]];
    for (const [module, name] of need) assert.equal(typeof (require(module) as Record<string, unknown>)[name], "function", `${module}.${name}`);
    assert.ok("lastWriteDisplayData" in (require("tslab/dist/jupyter") as object), "tslab's display helpers no longer write through jupyter.lastWriteDisplayData");
    assert.match(ts.version, /^5\./);
  });

  it("the executor's contract: cells wrapped as kernel/cell-lines.cjs expects, a value through console.log, errors and interrupts", () => {
    const executor = fs.readFileSync(require.resolve("tslab/dist/executor"), "utf8");
    // cell-lines names each cell's script by these wrappers (its tracebacks' line mapping depends on them).
    assert.ok(executor.includes('"(async function(exports, require) { "') && executor.includes('"(function(exports, require) { "'));
    assert.ok(executor.includes("breakOnSigint: true"), "a synchronous loop could no longer be interrupted");
    assert.ok(executor.includes("console.log(ret)"), "a cell's value no longer reaches the console given to createExecutor");
    assert.ok(executor.includes('console.error("%s%d:%d - %s"'), "diagnostics are printed another way (server.cjs skips them by this format)");
    assert.ok(executor.includes('new Error("Interrupted asynchronously")'), "errors.cjs names an interrupt by this message");
  });

  it("the compiler-host repair installs on tslab's TypeScript", () => {
    const { installCompileTimers } = kernel("compile-timers.cjs") as { installCompileTimers(ts: unknown): boolean };
    assert.equal(installCompileTimers(ts), true);
  });
});

describe("the kernel's own pieces", () => {
  it("history: tail, range (stop exclusive) and search with unique, with outputs when asked", () => {
    const { History } = kernel("history.cjs") as { History: new () => { add(n: number, input: string, output?: string): void; reply(r: object): Reply } };
    const history = new History();
    history.add(1, "6 * 7", "42");
    history.add(2, "const a = 1;");
    history.add(3, "6 * 7", "42");
    assert.deepEqual(history.reply({ hist_access_type: "tail", n: 2 }).history, [[1, 2, "const a = 1;"], [1, 3, "6 * 7"]]);
    assert.deepEqual(history.reply({ hist_access_type: "range", start: 1, stop: 3, output: true }).history,
      [[1, 1, ["6 * 7", "42"]], [1, 2, ["const a = 1;", null]]]);
    assert.deepEqual(history.reply({ hist_access_type: "search", pattern: "6 *", unique: true }).history, [[1, 3, "6 * 7"]]);
    assert.equal(history.reply({ hist_access_type: "bogus" }).status, "error");
  });

  it("is_complete: complete, incomplete with the next line's indent, invalid", () => {
    const { isComplete } = kernel("is-complete.cjs") as { isComplete(ts: unknown, code: string): Reply };
    assert.equal(isComplete(ts, "const x = 1;").status, "complete");
    assert.deepEqual(isComplete(ts, "function f() {"), { status: "incomplete", indent: "  " });
    assert.equal(isComplete(ts, "const = ;").status, "invalid");
    assert.equal(isComplete(ts, "function f() {\n\n\n").status, "complete", "two blank lines: run it as it is");
  });

  it("a compile error names the cell's line and puts a caret under its column", () => {
    const { compileError } = kernel("errors.cjs") as { compileError(d: object[], count: number, source: string): { ename: string; evalue: string; traceback: string[] } };
    const error = compileError([{ start: { line: 1, character: 6 }, messageText: "Type 'string' is not assignable to type 'number'.", code: 2322 }],
      4, "const a = 1;\nconst n: number = 'x';");
    assert.equal(error.ename, "TSError");
    assert.equal(error.evalue, "Cell In[4], line 2: Type 'string' is not assignable to type 'number'. (TS2322)");
    const plain = error.traceback.join("\n").replace(/\u001b\[[0-9;]*m/g, "").split("\n");
    const line = plain.findIndex((l) => l.includes("---->"));
    assert.equal(plain[line + 1]!.indexOf("^"), plain[line]!.indexOf("n: number"));
  });

  it("messages are signed with the connection's key and a wrong signature is refused", () => {
    const { Session } = kernel("wire.cjs") as { Session: new (key: string) => {
      frames(type: string, content: object, parent?: object): Array<Buffer | string>; parse(frames: Array<Buffer | string>): { header: { msg_type: string }; content: object };
    } };
    const session = new Session("secret");
    const frames = session.frames("execute_request", { code: "1" });
    assert.deepEqual(session.parse(frames).content, { code: "1" });
    assert.throws(() => new Session("other").parse(frames), /wrong signature/);
  });
});
