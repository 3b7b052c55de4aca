#!/usr/bin/env node
// Runs the project's test suites and ends with one line: `N passed, N failed, N skipped`, after a
// short list of what this machine could not test (`not tested here: ...`, from tests that need
// hardware it lacks, e.g. vLLM without AVX-512 or a GPU: gpu-server/art_server/hardware.py).
//
//   node scripts/test.mjs                 every stage, every test (`npm test`)
//   node scripts/test.mjs --fast          the fast tier (`npm run test:fast`): the checks, and the tests
//                                         that start no server, browser or vLLM (*.fast.test.ts, pytest -m fast)
//   node scripts/test.mjs pytest ts       only the named stages (typecheck, ts, package, pytest, notebooks, hardware)
//   node scripts/test.mjs --serial        one stage at a time, its output live (by default two lanes run
//                                         side by side, each stage's output printed whole when it ends
//                                         and written live to .artifacts/test-logs/)
//
// Stages: the checks (the strict TypeScript check, lib/ under tslab's TypeScript 5.0, ruff and pyright
// over the Python), the TypeScript tests (node's test runner with tsx), the package installed from
// outside the repo (tests/ts/package, the same runner), the gpu-server's pytest suite, and every
// notebook executed by nbclient with the project kernel. Each test stage prints its slowest tests. Set-up is `scripts/setup.mjs`; `npm test` runs it first.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ARTIFACTS, ROOT, VENV_BIN, VENV_PYTHON, venvEnv } from "./project.mjs";

const bin = (name) => path.join(ROOT, "node_modules", ".bin", name);

const args = process.argv.slice(2);
const fast = args.includes("--fast");
// The fast tier must start no server: LocalBackend gets a server command that fails saying so, and
// the pytest and browser helpers refuse (ART_TEST_TIER).
const tierEnv = fast ? { ART_TEST_TIER: "fast", ART_SERVER_COMMAND: path.join(ROOT, "scripts", "fast-tier-server.mjs") } : {};

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

/** The slowest top-level tests of node's spec reporter (`✔ name (123.4ms)` at the start of a line). */
function slowestNodeTests(output, n = 15) {
  const rows = [...output.matchAll(/^[✔✖] (.+) \(([\d.]+)ms\)$/gm)].map((m) => ({ name: m[1], seconds: Number(m[2]) / 1000 }));
  // The spec reporter repeats failed tests at the end: each name once.
  const byName = new Map(rows.map((r) => [r.name, r]));
  return [...byName.values()].sort((a, b) => b.seconds - a.seconds).slice(0, n);
}

/** Counts from node's test runner (`ℹ pass 3`, `ℹ fail 0`, `ℹ skipped 0`). */
function nodeTestCounts(output) {
  const count = (word) => Number(output.match(new RegExp(`ℹ ${word} (\\d+)`))?.[1] ?? 0);
  return { passed: count("pass"), failed: count("fail") + count("cancelled"), skipped: count("skipped") };
}

const PYTHON_SOURCES = ["gpu-server", "scripts", "bench", "tests/notebooks"];

const PACKAGE_TESTS = path.join(ROOT, "tests", "ts", "package") + path.sep;

/** node's test runner with tsx over `files`, one file at a time. */
function nodeTestStage(name, files) {
  return {
    name,
    cmd: process.execPath,
    args: ["--import", "tsx", "--test", "--test-reporter=spec", "--test-concurrency=1", ...files],
    counts: nodeTestCounts,
    slowest: slowestNodeTests,
    env: venvEnv(tierEnv),
  };
}

const STAGES = {
  typecheck: [
    { name: "tsc --strict (lib/ and tests)", cmd: bin("tsc"), args: ["-p", "tsconfig.json"] },
    {
      name: "lib/ under tslab's TypeScript 5.0",
      cmd: process.execPath,
      args: [path.join(ROOT, "node_modules", "@tslab", "typescript-for-tslab", "bin", "tsc"), "-p", "tsconfig.tslab.json"],
    },
    { name: "ruff check (Python lint)", cmd: path.join(VENV_BIN, "ruff"), args: ["check", ...PYTHON_SOURCES] },
    { name: "ruff format --check", cmd: path.join(VENV_BIN, "ruff"), args: ["format", "--check", ...PYTHON_SOURCES] },
    { name: "pyright (gpu-server types)", cmd: bin("pyright"), args: ["-p", path.join(ROOT, "gpu-server")] },
  ],
  ts: [nodeTestStage(fast ? "TypeScript tests, fast tier (*.fast.test.ts)" : "TypeScript tests (node:test + tsx)",
    findTests(path.join(ROOT, "tests", "ts"), fast ? ".fast.test.ts" : ".test.ts").filter((f) => !f.startsWith(PACKAGE_TESTS)))],
  // Its own stage so that it can run in the other lane: it packs art-ts and installs it in projects
  // outside the repo (minutes of npm and tsc) and starts no server of its own for most of that time.
  package: fast ? [] : [nodeTestStage("the package from outside the repo (tests/ts/package)", findTests(PACKAGE_TESTS, ".test.ts"))],
  pytest: [{
    name: fast ? "gpu-server pytest, fast tier (-m fast)" : "gpu-server pytest",
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=15", "-m", fast ? "fast" : "not needs"],
    cwd: path.join(ROOT, "gpu-server"),
    counts: pytestCounts,
    env: venvEnv(tierEnv),
  }],
  // The tests that need hardware (`@pytest.mark.needs`: vLLM's CPU build on AVX-512, CUDA) as a stage
  // of their own, so the lanes can be balanced around them: where they run they take ~12 min of 2
  // cores; where they cannot, they skip in seconds with the reason named.
  hardware: fast ? [] : [{
    name: "gpu-server pytest, hardware (-m needs: vLLM, CUDA)",
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10", "-m", "needs"],
    cwd: path.join(ROOT, "gpu-server"),
    counts: pytestCounts,
    env: venvEnv(tierEnv),
  }],
  notebooks: fast ? [] : [{
    name: "notebooks (nbclient, ART_SMOKE=1)",
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10", "tests/notebooks"],
    counts: pytestCounts,
    env: venvEnv({ ART_SMOKE: "1" }),
  }],
};

/** `[hardware] N skipped: not tested here: ...` lines (gpu-server/tests/hardware_marks.py), as reason -> count. */
function notTested(output) {
  const found = new Map();
  for (const m of output.matchAll(/^\[hardware\] (\d+) skipped: not tested here: (.+)$/gm)) found.set(m[2], (found.get(m[2]) ?? 0) + Number(m[1]));
  return found;
}

// Two lanes run side by side (the suite waits on servers, kernels and a browser about half of its time,
// so two lanes nearly halve the wall time on 2 cores, and every test runs beside another load, which
// is how flaky timing shows up). Within a lane, stages run in order. `--serial` runs one stage at a time.
// The full suite's split was measured on a 2-core Intel Xeon with AVX-512 (vLLM's CPU build runs):
// pytest 790 s and hardware 700 s beside typecheck 110 s, ts 705 s, notebooks ~500 s and package 130 s.
const LANES = fast ? [["typecheck"], ["ts", "pytest"]] : [["pytest", "hardware"], ["typecheck", "ts", "notebooks", "package"]];
const LOGS = path.join(ARTIFACTS, "test-logs");
const unlaned = Object.keys(STAGES).filter((key) => !LANES.flat().includes(key) && STAGES[key].length);
if (unlaned.length) throw new Error(`scripts/test.mjs: stage(s) in no lane: ${unlaned.join(", ")}`);

function runStage(stage, { live, env }) {
  return new Promise((resolve) => {
    const started = Date.now();
    const slug = stage.name.replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "").toLowerCase();
    const logFile = path.join(LOGS, `${slug}.log`);
    const log = fs.createWriteStream(logFile);
    console.log(live ? `\n=== ${stage.name} ===` : `[test] started: ${stage.name} (log: ${path.relative(ROOT, logFile)})`);
    const child = spawn(stage.cmd, stage.args, { cwd: stage.cwd ?? ROOT, env: { ...(stage.env ?? process.env), ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const tee = (stream) => (chunk) => {
      output += chunk;
      log.write(chunk);
      if (live) stream.write(chunk);
    };
    child.stdout.on("data", tee(process.stdout));
    child.stderr.on("data", tee(process.stderr));
    child.on("error", (error) => {
      output += `could not start ${stage.cmd}: ${error.message} (run npm run setup)\n`;
    });
    child.on("close", (code) => {
      log.end();
      const seconds = (Date.now() - started) / 1000;
      let counts = stage.counts ? stage.counts(output) : code === 0 ? { passed: 1, failed: 0, skipped: 0 } : { passed: 0, failed: 1, skipped: 0 };
      // A non-zero exit with no failure counted (a crash, a collection error) is a failure.
      if (code !== 0 && counts.failed === 0) counts = { ...counts, failed: 1 };
      if (code === 0 && counts.passed === 0 && stage.counts) counts = { ...counts, failed: counts.failed + 1, noTests: true };
      // Side by side, a stage's output is printed whole when it ends, so two stages never interleave.
      let report = live ? "" : `\n=== ${stage.name} (${seconds.toFixed(0)} s) ===\n${output}`;
      if (stage.slowest) {
        report += `\n--- slowest tests of this stage ---\n`;
        for (const t of stage.slowest(output)) report += `${t.seconds.toFixed(1).padStart(8)} s  ${t.name}\n`;
      }
      process.stdout.write(report);
      resolve({ name: stage.name, code, seconds, ...counts, notTested: notTested(output) });
    });
  });
}

/** The STAGES key a stage (by its name) belongs to, to print the summary in the stages' order. */
function stageKey(name) {
  return Object.keys(STAGES).find((key) => STAGES[key].some((stage) => stage.name === name));
}

async function main() {
  const serial = args.includes("--serial");
  const wanted = args.filter((a) => a !== "--fast" && a !== "--serial");
  const unknown = wanted.filter((w) => !(w in STAGES));
  if (unknown.length) {
    console.error(`unknown stage(s) or option(s): ${unknown.join(", ")}; stages: ${Object.keys(STAGES).join(", ")}; options: --fast, --serial`);
    process.exit(2);
  }
  fs.mkdirSync(LOGS, { recursive: true });
  const started = Date.now();
  const chosen = (key) => wanted.length === 0 || wanted.includes(key);
  const lanes = serial ? [Object.keys(STAGES).filter(chosen)] : LANES.map((lane) => lane.filter(chosen)).filter((l) => l.length);
  const live = lanes.length === 1;
  // Side by side, each lane's torch gets its share of the cores: two processes that each start a
  // thread per core contend (measured on 2 cores, an hf-engine test beside a training test: 71 s and
  // 71 s with the default threads, 51 s and 61 s with one thread each). OMP_NUM_THREADS set by hand wins.
  const threads = lanes.length > 1 && !process.env.OMP_NUM_THREADS
    ? { OMP_NUM_THREADS: String(Math.max(1, Math.floor(os.availableParallelism() / lanes.length))) } : {};
  const laneResults = await Promise.all(lanes.map(async (lane) => {
    const results = [];
    for (const key of lane) for (const stage of STAGES[key]) results.push(await runStage(stage, { live, env: threads }));
    return results;
  }));
  const order = Object.keys(STAGES);
  const results = laneResults.flat().sort((a, b) => order.indexOf(stageKey(a.name)) - order.indexOf(stageKey(b.name)));
  console.log(`\n=== summary${fast ? " (fast tier)" : ""} ===`);
  for (const r of results) {
    const status = r.failed ? "FAIL" : "ok  ";
    console.log(`${status} ${r.name.padEnd(46)} ${String(r.passed).padStart(4)} passed ${String(r.failed).padStart(3)} failed` +
      `${r.skipped ? ` ${r.skipped} skipped` : ""}${r.noTests ? " (ran no test)" : ""}  ${r.seconds.toFixed(1)} s`);
  }
  const notTestedHere = new Map();
  for (const r of results) for (const [what, n] of r.notTested) notTestedHere.set(what, (notTestedHere.get(what) ?? 0) + n);
  if (notTestedHere.size) {
    console.log("\nnot tested here (this machine lacks the hardware; ART_HARDWARE overrides the detection):");
    for (const [what, n] of notTestedHere) console.log(`  ${what}: ${n} test${n === 1 ? "" : "s"} skipped`);
  }
  const total = (key) => results.reduce((n, r) => n + r[key], 0);
  console.log(`\n${total("passed")} passed, ${total("failed")} failed, ${total("skipped")} skipped in ${((Date.now() - started) / 60000).toFixed(1)} min`);
  process.exit(total("failed") ? 1 : 0);
}

main();
