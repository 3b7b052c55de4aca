#!/usr/bin/env node
// The README's picture: the training chart of a notebook's committed full run
// (notebooks/results/<name>.html, written by `npm run cookbook`), drawn by plotly in headless
// Chromium and saved as docs/images/<name>-reward.png.
//
//   node scripts/readme-image.mjs [tictactoe]
import path from "node:path";
import { chromium } from "playwright-core";
import { findChromium, ROOT } from "./project.mjs";

const name = process.argv[2] ?? "tictactoe";
const executablePath = findChromium();
if (!executablePath) throw new Error("chromium not found: run `node scripts/setup.mjs --browser` or set ART_CHROMIUM");
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 900 }, deviceScaleFactor: 2 });
  await page.goto(`file://${path.join(ROOT, "notebooks", "results", `${name}.html`)}`);
  // The first chart whose title is the reward curve, once plotly has drawn it.
  const chart = page.locator(".js-plotly-plot", { has: page.locator(".gtitle", { hasText: "reward per step" }) }).first();
  await chart.waitFor({ timeout: 30_000 });
  const file = path.join(ROOT, "docs", "images", `${name}-reward.png`);
  await chart.screenshot({ path: file });
  console.log(`wrote ${path.relative(ROOT, file)}`);
} finally {
  await browser.close();
}
