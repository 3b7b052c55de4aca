// examples/tracking.ts runs as a user runs it, on builtin:tiny for a few steps, reporting to W&B
// (offline: nothing leaves the machine) and to Trackio (a local store). The W&B run is read back with
// wandb's own reader; Trackio's dashboard is opened in headless Chromium, as a user opens it with
// `npm run dashboard`, and its reward chart is looked at (a screenshot lands in .art/test-artifacts).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after, describe, it } from "node:test";
import { chromium } from "playwright-core";
import { ARTIFACTS, launchChromium, ROOT, run, VENV_BIN } from "../support/helpers";

const STEPS = 4;

/** What the chart's pixels are read through (the tests compile without lib "dom"). */
interface Canvas {
  width: number;
  height: number;
  getContext(kind: "2d"): { getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } };
}

describe("examples/tracking.ts", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "art-tracking-"));
  const env = { ...process.env, WANDB_MODE: "offline", WANDB_SILENT: "true", TRACKIO_DIR: path.join(tmp, "trackio") };
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  let name = "";

  it("reports each step to W&B offline, read back with wandb's reader", { timeout: 240_000 }, async () => {
    const ran = await run(process.execPath, ["--import", "tsx", path.join(ROOT, "examples", "tracking.ts"), "--base-model", "builtin:tiny",
      "--lr", "1e-2", "--steps", String(STEPS), "--data-dir", path.join(tmp, "data")], { cwd: ROOT, env });
    assert.equal(ran.exitCode, 0, ran.all.slice(-3000));
    name = /^(toy-\w+): reward per step( \d\.\d\d){4}$/m.exec(ran.stdout)?.[1] ?? "";
    assert.ok(name, ran.stdout);
    // Under load W&B may still be opening its run when the example prints; the run is read back below.
    assert.match(ran.stdout, /^wandb: (starting|running), \d rows sent so far/m);
    assert.match(ran.stdout, /^trackio: (starting|running), \d rows sent so far/m);

    const root = path.join(tmp, "data", "tracking-example", "models", name);
    const history = fs.readFileSync(path.join(root, "history.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(history.length, STEPS);
    const runDir = fs.readdirSync(path.join(root, "wandb")).find((d) => d.startsWith("offline-run-"));
    assert.ok(runDir);
    const inspect = await run(path.join(VENV_BIN, "wandb"), ["leet", "inspect", "--json", path.join(root, "wandb", runDir)], { env });
    assert.equal(inspect.exitCode, 0, inspect.all);
    const records = inspect.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
    const items = records.filter((r) => r.type === "history").map((r) => r.history.item);
    // Every row, sent once the server stopped at the latest, with the model's step as W&B's x axis.
    assert.deepEqual(items.map((i) => i.training_step), history.map((r) => r.step));
    assert.deepEqual(items.map((i) => i["train/reward"]), history.map((r) => r.reward));
    assert.ok(items.every((i) => i["train/trajectories._type"] === "table-file"), "a table of 4 trajectories per step");
    assert.equal(records.find((r) => r.type === "run").run.config.update.base_model, "builtin:tiny");
  });

  it("shows the reward curve on Trackio's dashboard", { timeout: 120_000 }, async () => {
    assert.ok(name, "the first test trains the model");
    const dashboard = spawn(path.join(VENV_BIN, "trackio"), ["show", "--project", "tracking-example"], { env, stdio: ["ignore", "pipe", "pipe"] });
    const browser = await launchChromium(chromium);
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("trackio show printed no URL")), 60_000);
        readline.createInterface({ input: dashboard.stdout }).on("line", (line) => {
          const found = /launched at: (http:\/\/127\.0\.0\.1:\d+\/\?project=[\w-]+)/.exec(line);
          if (found?.[1]) { clearTimeout(timer); resolve(found[1]); }
        });
      });
      const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
      await page.goto(url);
      await page.getByPlaceholder(/loss\|ndcg/).fill("/reward$");  // the dashboard's metric filter: train/reward
      const chart = page.locator(".plot-container").filter({ hasText: /^\s*reward/ }).filter({ hasText: name }).first();
      await chart.waitFor({ timeout: 30_000 });
      await page.waitForTimeout(1000);
      // The curve is drawn on a canvas: count the pixels in the run's colour (not white, not grey).
      const drawn = await chart.locator("canvas").first().evaluate((node) => {
        const canvas = node as unknown as Canvas;  // tests compile without lib "dom"
        const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
        let coloured = 0;
        for (let i = 0; i < data.length; i += 4) {
          const [r = 0, g = 0, b = 0, a = 0] = data.subarray(i, i + 4);
          if (a > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 40) coloured++;
        }
        return coloured;
      });
      fs.mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: path.join(ARTIFACTS, "trackio-dashboard.png") });
      assert.ok(drawn > 50, `the reward chart draws ${name}'s curve (${drawn} coloured pixels)`);
      assert.match(await page.locator("body").innerText(), new RegExp(`Runs \\(1\\)[\\s\\S]*${name}`));
    } finally {
      await browser.close();
      dashboard.kill();
    }
  });
});
