// The kernel-check notebook as a person sees it: executed by nbconvert, exported to HTML the way
// `npm run cookbook` exports its results (scripts/html-export.mjs), opened in headless Chromium
// (Debian's chromium, driven by playwright-core). The chart must render as a plotly SVG; a
// screenshot is kept in .artifacts/screenshots/ (git-ignored).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";
import { ARTIFACTS, exportHtml, launchChromium, ROOT } from "../support/helpers";

describe("kernel-check notebook in a browser", () => {
  it("shows the plotly chart in the nbconvert HTML export", async () => {
    const outDir = path.join(ARTIFACTS, "browser");
    fs.mkdirSync(outDir, { recursive: true });
    const html = exportHtml(path.join(ROOT, "tests", "notebooks", "kernel-check.ipynb"), outDir, { execute: true, env: { ART_SMOKE: "1" } });
    assert.equal(fs.readFileSync(html, "utf8").split("window.define=undefined;\n").length - 1, 1, "plotly.js once, in the page's head");

    const browser = await launchChromium(chromium);
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 1600 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto(pathToFileURL(html).href);
      await page.waitForSelector(".art-plotly svg.main-svg", { timeout: 30_000 });
      const traces = await page.locator(".art-plotly .scatterlayer .trace").count();
      const title = await page.locator(".art-plotly .gtitle").textContent();
      const shotDir = path.join(ARTIFACTS, "screenshots");
      fs.mkdirSync(shotDir, { recursive: true });
      const chart = page.locator(".art-plotly").first();
      await chart.scrollIntoViewIfNeeded();
      await chart.screenshot({ path: path.join(shotDir, "kernel-check-chart.png") });
      await page.screenshot({ path: path.join(shotDir, "kernel-check.png"), fullPage: true });
      assert.equal(traces, 1, "expected one plotted trace");
      assert.equal(title, "kernel check");
      assert.deepEqual(errors, [], "the page threw errors");
    } finally {
      await browser.close();
    }
  });
});
