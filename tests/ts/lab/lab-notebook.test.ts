// The cookbook as a user meets it: JupyterLab started by `npm start`'s command, notebooks opened in
// headless Chromium (playwright-core), read from what the page draws (plotly's own data on each
// chart element), never from the saved file. Notebooks are copied to a scratch root first, so Lab's
// autosave cannot write outputs into the committed ones. Screenshots: .artifacts/screenshots/.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, chromium, type Page } from "playwright-core";
import { ARTIFACTS, launchChromium, ROOT, type RunningLab, startLab } from "../support/helpers";
import { codeCell, editCell, errorOutputs, menu, promptOf, prompts, runAll, runCell, startCell, waitForKernelIdle } from "../support/lab-page";

const COOKBOOK = ["tictactoe.ipynb", "2048.ipynb", "codenames.ipynb", "sft-then-rl.ipynb", "bring-your-own-agent.ipynb", "mcp-rl.ipynb"];
const STEPS = 4; // tictactoe's training steps in this test (ART_STEPS), beside ART_SMOKE's small groups
const EVAL_GAMES = 8; // tictactoe's evaluation games under ART_SMOKE
const FIRST_RL_STEP = 1; // tictactoe's warm start (SFT) makes step 1; RL runs from there
const SHOTS = path.join(ARTIFACTS, "screenshots");

/** What the page drew for one chart: each trace's split, metric, kind and point count, and each y-axis's pixel span. */
interface DrawnChart {
  traces: Array<{ split: string; metric: string; smoothed: boolean; points: number }>;
  yAxes: Array<{ name: string; top: number; bottom: number; left: number }>;
}

// The page's DOM, as far as the functions run in it by page.evaluate use it (tests compile without lib "dom").
interface PageElement {
  textContent: string | null;
  querySelector(selector: string): PageElement | null;
  querySelectorAll(selector: string): Iterable<PageElement>;
}
declare const document: PageElement;

/** The charts drawn in the outputs of the code cell whose source contains `marker`, as plotly holds them. */
async function chartsOfCell(page: Page, marker: string): Promise<DrawnChart[]> {
  return page.evaluate((marker) => {
    const cell = [...document.querySelectorAll(".jp-CodeCell")].find((c) => c.querySelector(".jp-InputArea")?.textContent?.includes(marker));
    if (!cell) return [];
    return [...cell.querySelectorAll(".js-plotly-plot")].map((node) => {
      const gd = node as unknown as { data?: Array<{ meta?: { split: string; metric: string; smoothed: boolean }; x?: unknown[] }>;
        _fullLayout?: Record<string, { _offset?: number; _length?: number; side?: string; position?: number; _mainLinePosition?: number }> };
      const layout = gd._fullLayout ?? {};
      return {
        traces: (gd.data ?? []).filter((t) => t.meta).map((t) => ({ ...t.meta!, points: t.x?.length ?? 0 })),
        yAxes: Object.keys(layout).filter((k) => /^yaxis\d*$/.test(k)).map((k) => ({
          name: k, top: layout[k]!._offset ?? 0, bottom: (layout[k]!._offset ?? 0) + (layout[k]!._length ?? 0), left: layout[k]!._mainLinePosition ?? 0,
        })),
      };
    });
  }, marker);
}

function points(chart: DrawnChart | undefined, split: string, metric: string, smoothed = false): number {
  return chart?.traces.find((t) => t.split === split && t.metric === metric && t.smoothed === smoothed)?.points ?? 0;
}

/** The sources of a notebook file's cells. */
function cellSources(notebook: string): string[] {
  return (JSON.parse(notebook) as { cells: Array<{ source: string | string[] }> }).cells.map((c) => (Array.isArray(c.source) ? c.source.join("") : c.source));
}

/**
 * Changes files under the project root every `everyMs` until stopped, the way a user's machine
 * does while a notebook runs (an `npm install` rewriting package.json files, new files appearing):
 * these once broke tslab's compiler for good (kernel/compile-timers.cjs). Each rewrite is a rename
 * of a same-bytes copy, so nothing else ever reads a half-written file.
 */
function churnFiles(everyMs = 1500): { stop(): number } {
  const scratch = path.join(ARTIFACTS, "lab-churn");
  fs.mkdirSync(scratch, { recursive: true });
  let count = 0;
  const timer = setInterval(() => {
    for (const pkg of ["ai", "openai"]) {
      const manifest = path.join(ROOT, "node_modules", pkg, "package.json");
      const fresh = path.join(path.dirname(manifest), `.package.json.${process.pid}`);
      fs.writeFileSync(fresh, fs.readFileSync(manifest));
      fs.renameSync(fresh, manifest);
    }
    fs.writeFileSync(path.join(scratch, `module-${count % 5}.ts`), `export const n = ${count};\n`);
    count += 1;
  }, everyMs);
  return { stop: () => (clearInterval(timer), count) };
}

/** The text of the progress line(s) in the outputs of the code cell holding `marker`. */
async function progressOf(page: Page, marker: string): Promise<string> {
  return (await codeCell(page, marker).locator(".art-progress").allTextContents()).join(" | ");
}

describe("the cookbook in JupyterLab", () => {
  let lab: RunningLab;
  let browser: Browser;
  const root = path.join(ARTIFACTS, "lab-root");

  before(async () => {
    fs.rmSync(root, { recursive: true, force: true });
    fs.mkdirSync(path.join(root, "saved"), { recursive: true });
    fs.mkdirSync(SHOTS, { recursive: true });
    fs.copyFileSync(path.join(ROOT, "notebooks", "tictactoe.ipynb"), path.join(root, "tictactoe.ipynb"));
    fs.copyFileSync(path.join(ROOT, "notebooks", "bring-your-own-agent.ipynb"), path.join(root, "bring-your-own-agent.ipynb"));
    for (const name of COOKBOOK) fs.copyFileSync(path.join(ROOT, "notebooks", name), path.join(root, "saved", name));
    lab = await startLab(["--port", "0", "--token", "lab-test", "--root", root], { ART_SMOKE: "1", ART_STEPS: String(STEPS) });
    browser = await launchChromium(chromium);
  });
  after(async () => {
    await browser?.close();
    lab?.stop();
  });

  it("tictactoe: Run All draws a live reward chart that gains a point per step; re-running training after a reward edit continues it",
    { timeout: 900_000 }, async () => {
      const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
      await page.goto(`${lab.url}/lab/tree/tictactoe.ipynb?reset&token=${lab.token}`);
      await waitForKernelIdle(page);
      // Pipelined, as a user turns it on in the parameters cell (the headless notebook tests run it synchronously).
      const parametersSource = cellSources(fs.readFileSync(path.join(ROOT, "notebooks", "tictactoe.ipynb"), "utf8")).find((s) => s.includes("notebookParams("))!;
      assert.match(parametersSource, /maxStepsOffPolicy: 0,/);
      await editCell(page, "notebookParams(", parametersSource.replace("maxStepsOffPolicy: 0,", "maxStepsOffPolicy: 1,"));
      await menu(page, "Run", "Run All Cells");

      // While training runs, the page's chart must grow: a partial curve is seen (and kept as a screenshot).
      const training = "const run = await trainLoop";
      const seen = new Set<number>();
      const codeCells = await page.locator(".jp-CodeCell").count();
      const progressBeforeChart = new Set<string>();
      for (const deadline = Date.now() + 600_000; ;) {
        const chart = (await chartsOfCell(page, training))[0];
        const n = points(chart, "train", "reward");
        // The warm start's SFT row is history already, so the chart may be drawn before RL's first point.
        if (n + points(chart, "val", "reward") === 0) progressBeforeChart.add(await progressOf(page, training));
        if (n > 0 && n < STEPS && !seen.has(n)) {
          // A picture for the artifacts only: the chart may be redrawn (replaced) while it is taken.
          const element = codeCell(page, training).locator(".js-plotly-plot").first();
          await element.scrollIntoViewIfNeeded().then(() => element.screenshot({ path: path.join(SHOTS, `lab-tictactoe-live-step-${n}.png`), timeout: 5000 }))
            .catch((error: Error) => console.log(`live chart screenshot at ${n} points skipped: ${error.message.split("\n")[0]}`));
        }
        seen.add(n);
        const texts = await prompts(page);
        if (texts.length === codeCells && texts.every((t) => /\[\d+\]/.test(t))) break;
        assert.ok(Date.now() < deadline, `cells still running after 600 s: ${texts.join(" ")}`);
        await new Promise((r) => setTimeout(r, 300));
      }
      assert.deepEqual(await errorOutputs(page), [], "a cell wrote an error");
      const partial = [...seen].filter((n) => n > 0 && n < STEPS);
      assert.ok(partial.length >= 2, `the page's chart did not move during training (point counts seen: ${[...seen].join(", ")})`);
      // The training cell says what runs before its chart has a point.
      // (The loop first validates the step it starts from, the warm start's step 1, here beside step 1's rollouts: the run is pipelined.)
      assert.match([...progressBeforeChart].join("\n"),
        new RegExp(`training .*(step ${FIRST_RL_STEP}: gathering|evaluating step ${FIRST_RL_STEP}:) \\d+/\\d+ rollouts`), "no progress of the first step before the first chart point");
      assert.match(await progressOf(page, training), new RegExp(`${STEPS}/${STEPS} .*step ${FIRST_RL_STEP + STEPS - 1} reward -?\\d\\.\\d{3}`));
      // Parameters as written: a learning rate of 3e-4 must not read 0.000.
      const parameters = await codeCell(page, "notebookParams(").locator(".art-table").first().textContent() ?? "";
      assert.match(parameters, /learningRate\s*0\.000?[1-9]/, `the parameters table: ${parameters}`);

      const [live] = await chartsOfCell(page, training);
      assert.equal(points(live, "train", "reward"), STEPS, "one train point per step in the page");
      assert.equal(points(live, "train", "reward", true), STEPS, "a smoothed line beside the per-step one");
      assert.ok(points(live, "val", "reward") >= 2, "the val split as markers (at the starting step and after training)");
      const trainingCell = codeCell(page, training);
      await trainingCell.locator(".js-plotly-plot").first().screenshot({ path: path.join(SHOTS, "lab-tictactoe-chart.png") });

      // The multi-metric chart: one panel per metric, no two y-axes on the same spot.
      const metricsCell = "\"win\", \"illegal\", \"legal_moves\"";
      const [panels] = await chartsOfCell(page, metricsCell);
      assert.equal(panels?.yAxes.length, 3, "three metrics, three panels");
      for (const a of panels!.yAxes) {
        for (const b of panels!.yAxes) {
          if (a.name < b.name) assert.ok(a.bottom <= b.top || b.bottom <= a.top, `y-axes ${a.name} and ${b.name} overlap: ${JSON.stringify([a, b])}`);
        }
      }
      const metricsChart = codeCell(page, metricsCell).locator(".js-plotly-plot").first();
      await metricsChart.scrollIntoViewIfNeeded();
      await metricsChart.screenshot({ path: path.join(SHOTS, "lab-tictactoe-metrics.png") });

      // Games as transcripts with shaded tokens; notices as styled notes, never a stderr box.
      assert.ok(await page.locator(".art-trajectory .art-token").count() > 0, "no trajectory transcript with tokens");
      assert.equal(await page.locator(".jp-OutputArea-output:has(.art-trajectory)").count(), 2, "the untrained and the trained game, as transcripts");
      await page.locator(".art-trajectory").first().screenshot({ path: path.join(SHOTS, "lab-tictactoe-trajectory.png") });
      const stderrArt = await page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]', { hasText: "[art]" }).count();
      assert.equal(stderrArt, 0, "a notice was written to stderr");
      assert.equal(await page.getByText(/notified about .*news/i).count(), 0, "the Jupyter news pop-up is showing");

      // The verdict: the trained win rate with its 95% interval against the random player, on the page and in the results file.
      const verdict = await codeCell(page, "reportResults(").locator(".jp-OutputArea").first().textContent() ?? "";
      assert.match(verdict, new RegExp(`trained win \\d\\.\\d{3}, 95% interval \\d\\.\\d{3} to \\d\\.\\d{3} over ${EVAL_GAMES} games: (above every baseline|not above random legal player)`), verdict);
      assert.ok(verdict.includes("95% low") && verdict.includes("random legal player"), `the interval table: ${verdict}`);
      const written = JSON.parse(fs.readFileSync(path.join(ROOT, ".art", "results", "tictactoe.json"), "utf8"));
      assert.deepEqual([written.notebook, written.metric, written.evalGames, written.smoke], ["tictactoe", "win", EVAL_GAMES, true]);

      // Tweak the reward, re-run it and the training cell: training continues, the chart gains points.
      const rewardCell = "const REWARD = {";
      const source = fs.readFileSync(path.join(ROOT, "notebooks", "tictactoe.ipynb"), "utf8");
      const rewardSource = cellSources(source).find((s) => s.includes(rewardCell))!;
      assert.match(rewardSource, /win: 1,/);
      await editCell(page, rewardCell, rewardSource.replace("win: 1,", "win: 2,"));
      await runCell(page, rewardCell, 60_000);
      await runCell(page, training, 600_000);
      assert.deepEqual(await errorOutputs(page), [], "re-running the reward and training cells wrote an error");
      const [again] = await chartsOfCell(page, training);
      assert.equal(points(again, "train", "reward"), 2 * STEPS, "the re-run continues the run: its chart holds both runs' steps");
      assert.match(await codeCell(page, training).locator(".js-plotly-plot .annotation-text").allTextContents().then((t) => t.join(" | ")),
        new RegExp(`run from step ${FIRST_RL_STEP + STEPS} \\(\\d\\d:\\d\\d\\)`), "the re-run is not marked on the curve");
      await trainingCell.locator(".js-plotly-plot").first().screenshot({ path: path.join(SHOTS, "lab-tictactoe-rerun.png") });
      await page.screenshot({ path: path.join(SHOTS, "lab-tictactoe.png") });

      // Kernel > Interrupt in the middle of a long pipelined run (the parameters cell set
      // maxStepsOffPolicy 1 above): every stage stops, the server goes idle, the model stays at a committed step.
      const trainingSource = cellSources(source).find((s) => s.includes(training))!;
      await editCell(page, training, trainingSource.replace("steps: P.steps,", "steps: 100,"));
      await startCell(page, training);
      for (const deadline = Date.now() + 300_000; !/ [1-9]\d*\/100 /.test(await progressOf(page, training));) {
        assert.ok(Date.now() < deadline, `the long run did not finish a step within 300 s: ${await progressOf(page, training)}`);
        await new Promise((r) => setTimeout(r, 300));
      }
      await menu(page, "Kernel", "Interrupt Kernel");
      const clickedAt = Date.now();
      const interruptedAt = await progressOf(page, training);
      // The cell ends at once with KeyboardInterrupt (the loop stops at a committed step behind it).
      while (!/\[\d+\]/.test(await promptOf(page, training))) {
        assert.ok(Date.now() - clickedAt < 10_000, "the training cell still runs 10 s after Kernel > Interrupt");
        await new Promise((r) => setTimeout(r, 50));
      }
      const endedMs = Date.now() - clickedAt;
      console.log(`Kernel > Interrupt during training: the cell ended ${endedMs} ms after the menu click`);
      assert.ok(endedMs < 5000, `the training cell ended ${endedMs} ms after Kernel > Interrupt`);
      assert.match(await codeCell(page, training).locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').allTextContents()
        .then((t) => t.join("\n")), /KeyboardInterrupt/);
      await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first().waitFor({ timeout: 60_000 });
      const check = "interrupt-check";
      await editCell(page, metricsCell, `// ${check}: is anything still running on the server after Kernel > Interrupt?
const headers = { Authorization: \`Bearer \${backend.token}\` };
const serverState = async () => {
  const info = await (await fetch(\`\${backend.url}/v1/art/models/\${model.name}\`, { headers })).json() as { step: number; training: boolean };
  const load = await (await fetch(\`\${backend.url}/v1/engine/stats\`, { headers })).json() as { running: number; pending: number };
  return { step: info.step, training: info.training, running: load.running, pending: load.pending };
};
const stoppedBy = Date.now();
let idle = await serverState();
while ((idle.training || idle.running || idle.pending) && Date.now() - stoppedBy < 15_000) idle = await serverState();
const waitedMs = Date.now() - stoppedBy;
await new Promise((r) => setTimeout(r, 3000));
const later = await serverState();
const trainRows = (await model.historyRows()).filter((r) => r.split === "train").length;
console.log(\`\${"interrupt"}-state \${JSON.stringify({ idle, later, waitedMs, trainRows })}\`);`);
      await runCell(page, check, 60_000);
      const text = await codeCell(page, check).locator(".jp-OutputArea").first().textContent() ?? "";
      const found = /interrupt-state (\{.*\})/.exec(text);
      assert.ok(found, `the check cell printed no state: ${text}`);
      const state = JSON.parse(found[1]!) as { idle: Record<string, unknown>; later: Record<string, unknown>; waitedMs: number; trainRows: number };
      console.log(`Kernel > Interrupt at "${interruptedAt}": ${JSON.stringify(state)}`);
      assert.deepEqual({ training: state.idle.training, running: state.idle.running, pending: state.idle.pending },
        { training: false, running: 0, pending: 0 }, "the server still worked 15 s after the interrupt");
      assert.deepEqual(state.later, state.idle, "something ran on the server after it had gone idle");
      const step = state.idle.step as number;
      assert.ok(step > 2 * STEPS && step < 2 * STEPS + 100, `the interrupted run ended at step ${step}`);
      assert.equal(FIRST_RL_STEP + state.trainRows, step, "the model's step is not the last committed one (warm start + train rows != step)");
      await page.close();
    });

  it("bring-your-own-agent: Run All, twice, while files change under the project root, trains the AI SDK agent with MCP tools",
    { timeout: 900_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    await page.goto(`${lab.url}/lab/tree/bring-your-own-agent.ipynb?reset&token=${lab.token}`);
    await waitForKernelIdle(page);
    const churn = churnFiles();
    try {
      for (const run of [1, 2]) {
        await runAll(page, 420_000);
        assert.deepEqual(await errorOutputs(page), [], `Run All #${run} wrote an error`);
      }
    } finally {
      console.log(`files changed under the project root during the two runs: ${churn.stop()} rounds`);
    }
    // Saved, the notebook holds its outputs without a copy of plotly.js (Lab loads it from the server).
    await page.locator(".jp-Notebook .jp-Cell").first().click();
    await page.keyboard.press("Control+S");
    const saved = path.join(root, "bring-your-own-agent.ipynb");
    for (const deadline = Date.now() + 30_000; !fs.readFileSync(saved, "utf8").includes('"outputs": [\n    {');) {
      assert.ok(Date.now() < deadline, "Lab did not save the run notebook within 30 s");
      await new Promise((r) => setTimeout(r, 300));
    }
    const text = fs.readFileSync(saved, "utf8");
    assert.ok(!text.includes("plotly.js v"), "the saved notebook carries a copy of plotly.js");
    assert.ok(text.length < 1_000_000, `the saved notebook is ${text.length} bytes`);
    console.log(`bring-your-own-agent.ipynb saved after two runs: ${text.length} bytes`);
    assert.deepEqual(await errorOutputs(page), [], "a cell wrote an error");
    // This Lab runs with ART_STEPS set, which this notebook has no parameter for: a note names the close one.
    assert.match(await codeCell(page, "notebookParams(").locator(".art-notice").allTextContents().then((t) => t.join(" ")),
      /ART_STEPS is set, but no parameter of this notebook reads it: did you mean ART_RL_STEPS \(rlSteps\)\?/);
    // textContent, not innerText: Lab skips rendering cells outside the viewport (content-visibility), and innerText of those is "".
    // The MCP server's tools, listed by the tools cell.
    assert.match(await codeCell(page, "McpTools.stdio").locator(".jp-OutputArea").first().textContent() ?? "", /tools: list_towns, lookup_town/);
    // A captured rollout of the AI SDK agent, drawn as a transcript with its sampled tokens.
    const captured = codeCell(page, "const baseline = await evaluate").locator(".art-trajectory");
    assert.match(await captured.first().textContent() ?? "", /captured \(\d+ model call\(s\), \d+ sampled tokens\)/);
    assert.ok(await captured.locator(".art-token").count() > 0, "the captured turn shows no tokens");
    const [chart] = await chartsOfCell(page, "const run = await trainLoop");
    assert.equal(points(chart, "train", "reward"), 1, "one train point for the smoke run's one RL step (Run All starts a fresh run)");
    assert.ok(points(chart, "val", "reward") >= 1, "the evaluation questions as val");
    const table = await codeCell(page, "const final = await evaluate").locator(".art-table").first().textContent() ?? "";
    for (const row of ["base model", "fixed guess (median answer)", "after SFT", "after RL"]) assert.ok(table.includes(row), `the comparison lacks "${row}": ${table}`);
    const verdict = await codeCell(page, "reportResults(").locator(".jp-OutputArea").first().textContent() ?? "";
    assert.match(verdict, /trained correct \d\.\d{3}, 95% interval \d\.\d{3} to \d\.\d{3} over \d+ questions/, verdict);
    await captured.first().scrollIntoViewIfNeeded();
    await captured.first().screenshot({ path: path.join(SHOTS, "lab-bring-your-own-agent-captured.png") });
    const chartElement = codeCell(page, "const run = await trainLoop").locator(".js-plotly-plot").first();
    await chartElement.scrollIntoViewIfNeeded();
    await chartElement.screenshot({ path: path.join(SHOTS, "lab-bring-your-own-agent-chart.png") });
    await page.close();
  });

  it("every cookbook notebook opens and saves in Lab without a change to its file", { timeout: 300_000 }, async () => {
    for (const name of COOKBOOK) {
      const file = path.join(root, "saved", name);
      const mtime = fs.statSync(file).mtimeMs;
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      await page.goto(`${lab.url}/lab/tree/saved/${name}?reset&token=${lab.token}`);
      await waitForKernelIdle(page);
      await page.locator(".jp-Notebook .jp-Cell").first().click();
      await page.keyboard.press("Control+S");
      for (const deadline = Date.now() + 30_000; fs.statSync(file).mtimeMs === mtime;) {
        assert.ok(Date.now() < deadline, `${name}: Lab did not save within 30 s`);
        await new Promise((r) => setTimeout(r, 200));
      }
      await page.close();
      const committed = fs.readFileSync(path.join(ROOT, "notebooks", name), "utf8");
      assert.equal(fs.readFileSync(file, "utf8"), committed, `${name} changed when Lab opened and saved it`);
    }
  });
});
