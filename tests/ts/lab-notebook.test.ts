// The first notebook as a user meets it: JupyterLab started by `npm start`'s command, tictactoe.ipynb
// opened in headless Chromium (playwright-core), Run > Run All Cells with ART_SMOKE=1, and the reward
// chart found in the page, drawn by plotly. The notebook is copied to a scratch root first, so Lab's
// autosave cannot write outputs into the committed notebook. Screenshot: .artifacts/screenshots/.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { chromium } from "playwright-core";
import { ARTIFACTS, launchChromium, ROOT, startLab } from "./helpers";

describe("tictactoe.ipynb in JupyterLab", () => {
  it("runs all cells in the browser and shows the reward chart", { timeout: 600_000 }, async () => {
    const root = path.join(ARTIFACTS, "lab-root");
    fs.rmSync(root, { recursive: true, force: true });
    fs.mkdirSync(root, { recursive: true });
    fs.copyFileSync(path.join(ROOT, "notebooks", "tictactoe.ipynb"), path.join(root, "tictactoe.ipynb"));
    const ready = await startLab(["--port", "0", "--token", "lab-test", "--root", root], { ART_SMOKE: "1" });
    const browser = await launchChromium(chromium);
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      await page.goto(`${ready.url}/lab/tree/tictactoe.ipynb?token=${ready.token}`);
      // The kernel is ready when the toolbar names it and its status is idle.
      await page.locator(".jp-Notebook").first().waitFor({ timeout: 90_000 });
      await page.getByText("TypeScript (art-ts)").first().waitFor({ timeout: 90_000 });
      await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first().waitFor({ timeout: 90_000 });
      await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click();
      await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Cells$/ }).click();

      // The live chart appears during training; the run is over when the last cell has run.
      const chart = page.locator(".js-plotly-plot .main-svg, .art-plotly .main-svg").first();
      await chart.waitFor({ timeout: 300_000 });
      const codeCells = await page.locator(".jp-CodeCell").count();
      // Every code cell shows an execution count ("[7]:") once it has run.
      const prompts = page.locator(".jp-CodeCell .jp-InputPrompt");
      for (const deadline = Date.now() + 300_000; ;) {
        const texts = await prompts.allTextContents();
        if (texts.length === codeCells && texts.every((t) => /\[\d+\]/.test(t))) break;
        assert.ok(Date.now() < deadline, `cells still running after 300 s: ${texts.join(" ")}`);
        await new Promise((r) => setTimeout(r, 1000));
      }
      const legend = await page.locator(".js-plotly-plot .legendtext, .art-plotly .legendtext").allTextContents();
      const errors = await page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').allTextContents();
      const shotDir = path.join(ARTIFACTS, "screenshots");
      fs.mkdirSync(shotDir, { recursive: true });
      const firstChart = page.locator(".js-plotly-plot, .art-plotly").first();
      await firstChart.scrollIntoViewIfNeeded();
      await firstChart.screenshot({ path: path.join(shotDir, "lab-tictactoe-chart.png") });
      await page.screenshot({ path: path.join(shotDir, "lab-tictactoe.png") });
      assert.ok(legend.some((t) => t.includes("train/reward")), `no train/reward line in the chart legends: ${legend.join(", ")}`);
      assert.ok(legend.some((t) => t.includes("val/reward")), `no val/reward line in the chart legends: ${legend.join(", ")}`);
      assert.deepEqual(errors.filter((e) => /Error/.test(e)), [], "a cell wrote an error");
    } finally {
      await browser.close();
      ready.stop();
    }
  });
});
