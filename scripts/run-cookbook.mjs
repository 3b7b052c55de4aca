#!/usr/bin/env node
// `npm run cookbook`: runs each cookbook notebook with its full default parameters (no ART_SMOKE)
// and writes the executed copy and an HTML export to notebooks/results/. This is how the committed
// results were made; pass names to run only some: `npm run cookbook -- tictactoe 2048`, and
// `--seed N` for a second run with another seed (ART_SEED=N), kept beside the default one as
// `<notebook>-seedN.ipynb` and `.json` (no HTML export).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { exportHtml } from "./html-export.mjs";
import { ROOT, VENV_BIN, venvEnv } from "./project.mjs";

const ALL = ["tictactoe", "2048", "codenames", "sft-then-rl", "bring-your-own-agent", "mcp-rl"];
/** Outputs name the run's data dir; committed results say it relative to the project root. */
function stripMachinePaths(file) {
  const text = fs.readFileSync(file, "utf8");
  fs.writeFileSync(file, text.split(`${ROOT}${path.sep}`).join(""));
}

const args = process.argv.slice(2);
const seedAt = args.indexOf("--seed");
const seed = seedAt >= 0 ? args.splice(seedAt, 2)[1] : undefined;
if (seed !== undefined && !/^\d+$/.test(seed)) {
  console.error(`--seed takes a whole number (got ${seed ?? "nothing"})`);
  process.exit(2);
}
const suffix = seed === undefined || seed === "0" ? "" : `-seed${seed}`;
const names = args.length ? args : ALL;
const unknown = names.filter((n) => !ALL.includes(n));
if (unknown.length) {
  console.error(`unknown notebook(s) ${unknown.join(", ")}; choose from ${ALL.join(", ")}`);
  process.exit(2);
}
const outDir = path.join(ROOT, "notebooks", "results");
fs.mkdirSync(outDir, { recursive: true });
const env = { ...venvEnv() };
delete env.ART_SMOKE;
if (seed !== undefined) env.ART_SEED = seed;
const jupyter = path.join(VENV_BIN, "jupyter");
const rows = [];
for (const name of names) {
  const source = path.join(ROOT, "notebooks", `${name}.ipynb`);
  const started = Date.now();
  console.log(`[cookbook] ${name}: running with the default parameters${seed === undefined ? "" : ` and seed ${seed}`} ...`);
  const run = spawnSync(jupyter, ["nbconvert", "--to", "notebook", "--execute", source, "--output-dir", outDir, "--output", `${name}${suffix}`,
    "--ExecutePreprocessor.timeout=3600", "--ExecutePreprocessor.kernel_name=art-typescript"], { cwd: ROOT, env, stdio: "inherit" });
  if (run.status !== 0) {
    console.error(`[cookbook] ${name} failed (exit ${run.status})`);
    process.exit(1);
  }
  const executed = path.join(outDir, `${name}${suffix}.ipynb`);
  // The HTML page carries plotly.js (no Jupyter server hands it out there); the notebook does not.
  // Another seed's run keeps its executed notebook and verdict only: its page would add 5 MB of
  // plotly.js to the repository for a second look at the same charts.
  if (!suffix) exportHtml(executed, outDir, { env });
  for (const file of suffix ? [executed] : [executed, path.join(outDir, `${name}.html`)]) stripMachinePaths(file);
  rows.push(`${name}: ${((Date.now() - started) / 1000).toFixed(0)} s`);
}
console.log(`[cookbook] done: ${rows.join(", ")}; results in ${path.relative(ROOT, outDir)}/`);
// The README's results table is generated from the runs' JSON: rewrite it (git diff shows what moved).
spawnSync(process.execPath, [path.join(ROOT, "scripts", "results-table.mjs")], { cwd: ROOT, stdio: "inherit" });
