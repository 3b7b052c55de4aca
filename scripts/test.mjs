#!/usr/bin/env node
// Runs every test suite of the project and ends with one line: `N passed, N failed`.
//
//   node scripts/test.mjs                 all stages
//   node scripts/test.mjs pytest ts       only the named stages (typecheck, ts, pytest, notebooks)
//
// Stages: the strict TypeScript check (and lib/ under tslab's TypeScript 5.0), the TypeScript tests
// (node's test runner with tsx), the gpu-server's pytest suite, and every notebook executed by
// nbclient with the project kernel. Set-up is `scripts/setup.mjs`; `npm test` runs it first.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { ARTIFACTS, ROOT, VENV_PYTHON, venvEnv } from "./project.mjs";

const bin = (name) => path.join(ROOT, "node_modules", ".bin", name);

function findTests(dir, suffix) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return findTests(full, suffix);
    return entry.name.endsWith(suffix) ? [full] : [];
  }).sort();
}

/** Counts from a pytest summary line such as `== 3 passed, 1 failed, 2 errors in 4.1s ==`. */
function pytestCounts(output) {
  const line = output.trim().split("\n").reverse().find((l) => /\d+ (passed|failed|error)/.test(l)) ?? "";
  const count = (word) => Number(line.match(new RegExp(`(\\d+) ${word}`))?.[1] ?? 0);
  return { passed: count("passed"), failed: count("failed") + count("errors?"), skipped: count("skipped") };
}

/** Counts from node's test runner (`ℹ pass 3`, `ℹ fail 0`, `ℹ skipped 0`). */
function nodeTestCounts(output) {
  const count = (word) => Number(output.match(new RegExp(`ℹ ${word} (\\d+)`))?.[1] ?? 0);
  return { passed: count("pass"), failed: count("fail") + count("cancelled"), skipped: count("skipped") };
}

const STAGES = {
  typecheck: [
    { name: "tsc --strict (lib/ and tests)", cmd: bin("tsc"), args: ["-p", "tsconfig.json"] },
    {
      name: "lib/ under tslab's TypeScript 5.0",
      cmd: process.execPath,
      args: [path.join(ROOT, "node_modules", "@tslab", "typescript-for-tslab", "bin", "tsc"), "-p", "tsconfig.tslab.json"],
    },
  ],
  ts: [{
    name: "TypeScript tests (node:test + tsx)",
    cmd: process.execPath,
    args: ["--import", "tsx", "--test", "--test-reporter=spec", "--test-concurrency=1", ...findTests(path.join(ROOT, "tests", "ts"), ".test.ts")],
    counts: nodeTestCounts,
    env: venvEnv(),
  }],
  pytest: [{
    name: "gpu-server pytest",
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=15"],
    cwd: path.join(ROOT, "gpu-server"),
    counts: pytestCounts,
    env: venvEnv(),
  }],
  notebooks: [{
    name: "notebooks (nbclient, ART_SMOKE=1)",
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10", "tests/notebooks"],
    counts: pytestCounts,
    env: venvEnv({ ART_SMOKE: "1" }),
  }],
};

function runStage(stage) {
  return new Promise((resolve) => {
    const started = Date.now();
    console.log(`\n=== ${stage.name} ===`);
    const child = spawn(stage.cmd, stage.args, { cwd: stage.cwd ?? ROOT, env: stage.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const tee = (stream) => (chunk) => {
      output += chunk;
      stream.write(chunk);
    };
    child.stdout.on("data", tee(process.stdout));
    child.stderr.on("data", tee(process.stderr));
    child.on("error", (error) => {
      output += String(error);
      console.error(`could not start ${stage.cmd}: ${error.message} (run npm run setup)`);
    });
    child.on("close", (code) => {
      const seconds = (Date.now() - started) / 1000;
      let counts = stage.counts ? stage.counts(output) : code === 0 ? { passed: 1, failed: 0, skipped: 0 } : { passed: 0, failed: 1, skipped: 0 };
      // A non-zero exit with no failure counted (a crash, a collection error) is a failure.
      if (code !== 0 && counts.failed === 0) counts = { ...counts, failed: 1 };
      if (code === 0 && counts.passed === 0 && stage.counts) counts = { ...counts, failed: counts.failed + 1, noTests: true };
      resolve({ name: stage.name, code, seconds, ...counts });
    });
  });
}

async function main() {
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((w) => !(w in STAGES));
  if (unknown.length) {
    console.error(`unknown stage(s): ${unknown.join(", ")}; stages: ${Object.keys(STAGES).join(", ")}`);
    process.exit(2);
  }
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const results = [];
  for (const key of wanted.length ? wanted : Object.keys(STAGES)) {
    for (const stage of STAGES[key]) results.push(await runStage(stage));
  }
  console.log("\n=== summary ===");
  for (const r of results) {
    const status = r.failed ? "FAIL" : "ok  ";
    console.log(`${status} ${r.name.padEnd(40)} ${String(r.passed).padStart(4)} passed ${String(r.failed).padStart(3)} failed` +
      `${r.skipped ? ` ${r.skipped} skipped` : ""}${r.noTests ? " (ran no test)" : ""}  ${r.seconds.toFixed(1)} s`);
  }
  const passed = results.reduce((n, r) => n + r.passed, 0);
  const failed = results.reduce((n, r) => n + r.failed, 0);
  const skipped = results.reduce((n, r) => n + r.skipped, 0);
  console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`);
  process.exit(failed ? 1 : 0);
}

main();
