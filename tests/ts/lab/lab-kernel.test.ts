// The kernel as a JupyterLab user meets it (kernel/server.cjs): a cell's value is its Out[n], an
// error is a red error box naming the exception and the cell's TypeScript line, Run All stops at it,
// Kernel > Interrupt ends a long cell at once and keeps the variables, and Kernel > Restart leaves no
// gpu-server behind. Read from what the page draws, in headless Chromium. Screenshots: .artifacts/screenshots/.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, chromium } from "playwright-core";
import { ARTIFACTS, launchChromium, type RunningLab, startLab } from "../support/helpers";
import { codeCell, editCell, errorOutputs, menu, promptOf, prompts, runAll, runCell, startCell, waitForKernelIdle } from "../support/lab-page";

const SHOTS = path.join(ARTIFACTS, "screenshots");

const CELLS = [
  "// value\nconst answer = 6 * 7;\nanswer",
  '// rich value\nimport { Trajectory } from "./lib/index";\nnew Trajectory({ messagesAndChoices: [{ role: "user", content: "hello from a value" }], reward: 1 })',
  "// throws\nfunction check(x: number): void {\n  if (x > 1) throw new RangeError(`too big: ${x}`);\n}\ncheck(5);",
  '// after\nconsole.log("after the error");',
];

/** True while the process exists and is not a zombie (a container's init may never reap it). */
function alive(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.[0] !== "Z";
  } catch {
    return false;
  }
}

describe("the kernel in JupyterLab", () => {
  let lab: RunningLab;
  let browser: Browser;
  const root = path.join(ARTIFACTS, "lab-kernel-root");

  before(async () => {
    fs.rmSync(root, { recursive: true, force: true });
    fs.mkdirSync(SHOTS, { recursive: true });
    fs.mkdirSync(root, { recursive: true });
    const notebook = {
      cells: CELLS.map((source) => ({ cell_type: "code", execution_count: null, metadata: {}, outputs: [], source })),
      metadata: { kernelspec: { name: "art-typescript", display_name: "TypeScript (art-ts)", language: "typescript" } },
      nbformat: 4, nbformat_minor: 5,
    };
    fs.writeFileSync(path.join(root, "kernel-story.ipynb"), JSON.stringify(notebook));
    lab = await startLab(["--port", "0", "--token", "lab-kernel-test", "--root", root]);
    browser = await launchChromium(chromium);
  });
  after(async () => {
    await browser?.close();
    lab?.stop();
  });

  it("values are Out[n], errors are error boxes at the cell's line, Interrupt and Restart work", { timeout: 600_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    await page.goto(`${lab.url}/lab/tree/kernel-story.ipynb?reset&token=${lab.token}`);
    await waitForKernelIdle(page);

    // Run All: it stops at the cell that throws.
    await menu(page, "Run", "Run All Cells");
    for (const deadline = Date.now() + 120_000; ;) {
      const [value, rich, throws] = await prompts(page);
      if ([value, rich, throws].every((p) => /\[\d+\]/.test(p ?? ""))) break;
      assert.ok(Date.now() < deadline, `Run All did not reach the failing cell in 120 s: ${await prompts(page)}`);
      await new Promise((r) => setTimeout(r, 300));
    }
    await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first().waitFor({ timeout: 30_000 });
    assert.equal((await promptOf(page, "// after")).trim(), "[ ]:", "Run All went past the failing cell");
    assert.equal(await codeCell(page, "// after").locator(".jp-OutputArea-output").count(), 0);

    // A value is the cell's Out[n]; a trajectory shows its own view.
    const value = codeCell(page, "// value");
    assert.equal((await value.locator(".jp-OutputArea-output").first().textContent())?.trim(), "42");
    assert.equal((await value.locator(".jp-OutputArea-prompt").first().textContent())?.trim(), "[1]:", "no Out[1] prompt");
    const rich = codeCell(page, "// rich value");
    assert.match(await rich.locator(".art-trajectory").first().textContent() ?? "", /hello from a value/);

    // The error box: the exception, its message, and the cell's TypeScript lines (not compiled JavaScript's).
    const box = codeCell(page, "// throws").locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
    assert.equal(await box.count(), 1);
    const text = await box.first().textContent() ?? "";
    assert.match(text, /RangeError: too big: 5/);
    assert.match(text, /at check \(Cell In\[3\], line 3\)/);
    assert.match(text, /at Cell In\[3\], line 5/);
    assert.doesNotMatch(text, /evalmachine|tslab|art-cell/);
    const background = await box.first().evaluate((node) => (globalThis as unknown as { getComputedStyle(n: unknown): { backgroundColor: string } })
      .getComputedStyle(node).backgroundColor);
    const [red, green] = (background.match(/\d+/g) ?? []).map(Number);
    assert.ok(red !== undefined && green !== undefined && red > green, `the error box is not red: ${background}`);
    await box.first().screenshot({ path: path.join(SHOTS, "lab-kernel-error.png") });

    // Kernel > Interrupt ends a long cell with KeyboardInterrupt; the variables stay.
    await editCell(page, "// after", "// after\nawait new Promise((resolve) => setTimeout(resolve, 120_000));");
    await startCell(page, "// after");
    for (const deadline = Date.now() + 30_000; !(await promptOf(page, "// after")).includes("*");) {
      assert.ok(Date.now() < deadline, "the long cell did not start");
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 1000));
    const interruptedAt = Date.now();
    await menu(page, "Kernel", "Interrupt Kernel");
    while (!/\[\d+\]/.test(await promptOf(page, "// after"))) {
      assert.ok(Date.now() - interruptedAt < 10_000, "the interrupted cell still runs after 10 s");
      await new Promise((r) => setTimeout(r, 50));
    }
    const tookMs = Date.now() - interruptedAt;
    console.log(`Kernel > Interrupt: the cell ended ${tookMs} ms after the menu click (page polling included)`);
    assert.ok(tookMs < 3000, `the interrupt took ${tookMs} ms in the page`);
    assert.match(await codeCell(page, "// after").locator(".jp-OutputArea-output").first().textContent() ?? "", /KeyboardInterrupt/);
    await editCell(page, "// value", "// value\nanswer + 1");
    await runCell(page, "// value", 60_000);
    assert.equal((await codeCell(page, "// value").locator(".jp-OutputArea-output").first().textContent())?.trim(), "43");

    // Kernel > Restart: the kernel and the gpu-server its cells started are gone.
    const dataDir = path.join(root, "data");
    await editCell(page, "// rich value", `// rich value\nimport { LocalBackend } from "./lib/index";
const backend = await LocalBackend.start({ baseModel: "builtin:tiny", dataDir: ${JSON.stringify(dataDir)} });
[process.pid, backend.pid]`);
    await runCell(page, "// rich value", 180_000);
    const pids = (await codeCell(page, "// rich value").locator(".jp-OutputArea-output").first().textContent() ?? "").match(/\d+/g)?.map(Number) ?? [];
    assert.equal(pids.length, 2, `no pids in the output: ${pids}`);
    assert.ok(pids.every(alive), `not running: ${pids}`);
    await menu(page, "Kernel", /^Restart Kernel…$/);
    await page.locator(".jp-Dialog-button", { hasText: /^Restart$/ }).click();
    for (const deadline = Date.now() + 20_000; pids.some(alive);) {
      assert.ok(Date.now() < deadline, `still running 20 s after Kernel > Restart: ${pids.filter(alive).join(", ")} of kernel, server ${pids}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first().waitFor({ timeout: 60_000 });
    await runCell(page, "// value", 60_000);
    assert.match(await codeCell(page, "// value").locator(".jp-OutputArea-output").first().textContent() ?? "", /Cannot find name 'answer'/,
      "the restarted kernel kept the old variables");
    assert.ok((await errorOutputs(page)).some((e) => /TSError/.test(e)));
    await page.close();
  });
});
