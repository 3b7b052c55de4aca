#!/usr/bin/env node
// Runs the project's test suites and ends with one line: `N passed, N failed, N skipped`, after a
// short list of what this machine could not test (`not tested here: ...`, from tests that need
// hardware it lacks, e.g. vLLM without AVX-512 or a GPU: gpu-server/art_server/hardware.py).
//
//   node scripts/test.mjs                 every stage, every test (`npm test`)
//   node scripts/test.mjs --fast          the fast tier (`npm run test:fast`): the checks, and the tests
//                                         that start no server, browser or vLLM (*.fast.test.ts, pytest -m fast)
//   node scripts/test.mjs pytest ts       only the named stages (typecheck, ts, package, pytest, notebooks, hardware)
//   node scripts/test.mjs --serial        one job at a time, its output live (by default two workers run
//                                         jobs side by side, each job's output printed whole when it ends
//                                         and written live to .artifacts/test-logs/)
//   node scripts/test.mjs --workers=3     that many workers
//   node scripts/test.mjs --record-times  also write this run's times to scripts/test-times.json
//
// Stages: the checks (the strict TypeScript check, lib/ under tslab's TypeScript 5.0, ruff and pyright
// over the Python), the TypeScript tests (node's test runner with tsx), the package installed from
// outside the repo (tests/ts/package, the same runner), the gpu-server's pytest suite, and every
// notebook executed by nbclient with the project kernel. Stages are split into jobs by their measured
// times and spread over the workers (scripts/test-schedule.mjs). Set-up is `scripts/setup.mjs`; `npm test` runs it first.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ARTIFACTS, ROOT, VENV_BIN, VENV_PYTHON, venvEnv } from "./project.mjs";
import { COMMITTED_TIMES, estimate, loadTimes, packShards, runJobs, saveTimes } from "./test-schedule.mjs";

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
function nodeTestJob(stage, name, files) {
  return {
    stage,
    name,
    cmd: process.execPath,
    args: ["--import", "tsx", "--test", "--test-reporter=spec", "--test-concurrency=1", ...files],
    counts: nodeTestCounts,
    slowest: slowestNodeTests,
    env: venvEnv(tierEnv),
  };
}

const GPU_SERVER = path.join(ROOT, "gpu-server");
const relative = (file) => path.relative(ROOT, file).split(path.sep).join("/");

/** gpu-server's pytest over `files` (all of tests/ when none), with a JUnit report for the files' times. */
function pytestJob(stage, name, marker, files = []) {
  const junit = path.join(LOGS, `${slug(name)}.xml`);
  return {
    stage,
    name,
    cmd: VENV_PYTHON,
    args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10", `--junitxml=${junit}`, "-m", marker,
      ...files.map((f) => path.relative(GPU_SERVER, f))],
    cwd: GPU_SERVER,
    counts: pytestCounts,
    env: venvEnv(tierEnv),
    junit,
    // exit 5: every test of the shard's files was deselected by the marker (they are another stage's)
    emptyIsFine: files.length > 0,
  };
}

// Each stage as jobs, from the measured times (scripts/test-schedule.mjs): the TypeScript tests one
// process per file, gpu-server's pytest packed into shards of about SHARD_S seconds, the others whole
// (the hardware stage starts vLLM, and two vLLMs side by side on 2 cores would slow both).
const SHARD_S = 240;
const STAGES = {
  typecheck: () => [
    { name: "tsc --strict (lib/ and tests)", cmd: bin("tsc"), args: ["-p", "tsconfig.json"] },
    {
      name: "lib/ under tslab's TypeScript 5.0",
      cmd: process.execPath,
      args: [path.join(ROOT, "node_modules", "@tslab", "typescript-for-tslab", "bin", "tsc"), "-p", "tsconfig.tslab.json"],
    },
    { name: "ruff check (Python lint)", cmd: path.join(VENV_BIN, "ruff"), args: ["check", ...PYTHON_SOURCES] },
    { name: "ruff format --check", cmd: path.join(VENV_BIN, "ruff"), args: ["format", "--check", ...PYTHON_SOURCES] },
    { name: "pyright (gpu-server types)", cmd: bin("pyright"), args: ["-p", GPU_SERVER] },
  ].map((job) => ({ ...job, stage: "typecheck", key: `typecheck:${job.name}` })),
  ts: () => findTests(path.join(ROOT, "tests", "ts"), fast ? ".fast.test.ts" : ".test.ts").filter((f) => !f.startsWith(PACKAGE_TESTS))
    .map((f) => ({ ...nodeTestJob("ts", relative(f), [f]), key: `ts:${relative(f)}` })),
  // It packs art-ts and installs it in projects outside the repo (minutes of npm and tsc).
  package: () => fast ? [] : findTests(PACKAGE_TESTS, ".test.ts").map((f) => ({ ...nodeTestJob("package", relative(f), [f]), key: `package:${relative(f)}` })),
  pytest: (times) => {
    const files = fs.readdirSync(path.join(GPU_SERVER, "tests")).filter((f) => /^test_.*\.py$/.test(f)).sort()
      .map((f) => path.join(GPU_SERVER, "tests", f));
    const key = (f) => `pytest${fast ? "-fast" : ""}:${relative(f)}`;
    const overheadKey = `pytest${fast ? "-fast" : ""}:overhead`;  // a process's own seconds: imports, the tiny server its tests share
    const shards = packShards(files, (f) => estimate(times, key(f)), { target: fast ? 1e9 : SHARD_S, overhead: times[overheadKey] ?? 10 });
    return shards.map((shard, i) => ({
      ...pytestJob("pytest", `${fast ? "gpu-server pytest, fast tier (-m fast)" : "gpu-server pytest"}, shard ${i + 1} of ${shards.length}`,
        fast ? "fast" : "not needs", shard.files),
      seconds: shard.seconds,
      fileKeys: Object.fromEntries(shard.files.map((f) => [path.basename(f, ".py"), key(f)])),
      overheadKey,
    }));
  },
  // The tests that need hardware (`@pytest.mark.needs`: vLLM's CPU build on AVX-512, CUDA): where
  // they run they take ~10 min of 2 cores; where they cannot, they skip in seconds with the reason named.
  hardware: () => fast ? [] : [{ ...pytestJob("hardware", "gpu-server pytest, hardware (-m needs: vLLM, CUDA)", "needs"), key: "hardware:all", group: "vllm" }],
  // The notebook that trains through vLLM is a job of its own, in the vLLM group (one vLLM at a time).
  notebooks: () => fast ? [] : [["test_notebooks.py", "not needs"], ["test_notebooks.py", "needs"], ["test_kernel_protocol.py", "not needs"]]
    .map(([file, marker]) => ({
      stage: "notebooks",
      name: `notebooks (nbclient, ART_SMOKE=1): ${file}${marker === "needs" ? ", vLLM" : ""}`,
      key: `notebooks:${file}${marker === "needs" ? "[vllm]" : ""}`,
      cmd: VENV_PYTHON,
      args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=10", "-m", marker, path.join("tests", "notebooks", file)],
      counts: pytestCounts,
      env: venvEnv({ ART_SMOKE: "1" }),
      ...(marker === "needs" ? { group: "vllm", emptyIsFine: true } : {}),
    })),
};
const STAGE_TITLES = {
  typecheck: "checks (tsc, tslab's tsc, ruff, pyright)", ts: fast ? "TypeScript tests, fast tier" : "TypeScript tests (node:test + tsx)",
  package: "the package from outside the repo", pytest: fast ? "gpu-server pytest, fast tier" : "gpu-server pytest",
  hardware: "gpu-server pytest, hardware (vLLM, CUDA)", notebooks: "notebooks (nbclient, ART_SMOKE=1)",
};

/** `[hardware] N skipped: not tested here: ...` lines (gpu-server/tests/hardware_marks.py), as reason -> count. */
function notTested(output) {
  const found = new Map();
  for (const m of output.matchAll(/^\[hardware\] (\d+) skipped: not tested here: (.+)$/gm)) found.set(m[2], (found.get(m[2]) ?? 0) + Number(m[1]));
  return found;
}

function slug(name) {
  return name.replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "").toLowerCase();
}

/** Seconds per test file from a pytest JUnit report (setup and teardown included), by the module's name. */
function junitFileSeconds(file) {
  let xml = "";
  try {
    xml = fs.readFileSync(file, "utf8");
  } catch {
    return {};
  }
  const out = {};
  for (const m of xml.matchAll(/<testcase [^>]*classname="([^"]*)"[^>]*time="([\d.]+)"/g)) {
    const module = m[1].split(".").find((part) => part.startsWith("test_")) ?? m[1];
    out[module] = (out[module] ?? 0) + Number(m[2]);
  }
  return out;
}

function runJob(job, { live, env }) {
  return new Promise((resolve) => {
    const started = Date.now();
    const logFile = path.join(LOGS, `${slug(job.name)}.log`);
    const log = fs.createWriteStream(logFile);
    if (!live) console.log(`[test] started: ${job.name}`);
    else console.log(`\n=== ${job.name} ===`);
    if (job.junit) fs.rmSync(job.junit, { force: true });  // a run that dies before writing it leaves no old times
    const child = spawn(job.cmd, job.args, { cwd: job.cwd ?? ROOT, env: { ...(job.env ?? process.env), ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const tee = (stream) => (chunk) => {
      output += chunk;
      log.write(chunk);
      if (live) stream.write(chunk);
    };
    child.stdout.on("data", tee(process.stdout));
    child.stderr.on("data", tee(process.stderr));
    child.on("error", (error) => {
      output += `could not start ${job.cmd}: ${error.message} (run npm run setup)\n`;
    });
    child.on("close", (code) => {
      log.end();
      const seconds = (Date.now() - started) / 1000;
      let counts = job.counts ? job.counts(output) : code === 0 ? { passed: 1, failed: 0, skipped: 0 } : { passed: 0, failed: 1, skipped: 0 };
      const empty = code === 5 && job.emptyIsFine && counts.failed === 0;
      // A non-zero exit with no failure counted (a crash, a collection error) is a failure.
      if (code !== 0 && !empty && counts.failed === 0) counts = { ...counts, failed: 1 };
      // Side by side, a job's output is printed whole when it ends, so two jobs never interleave.
      let report = live ? "" : `\n=== ${job.name} (${seconds.toFixed(0)} s) ===\n${output}`;
      if (job.slowest) {
        report += `\n--- slowest tests of this job ---\n`;
        for (const t of job.slowest(output)) report += `${t.seconds.toFixed(1).padStart(8)} s  ${t.name}\n`;
      }
      process.stdout.write(report);
      // What the next run's plan reads: the job's seconds, or (a pytest shard) each file's and the process's own.
      const times = {};
      if (job.fileKeys) {
        const files = junitFileSeconds(job.junit);
        // a module with no test in the report had every test deselected (another stage's): it costs nothing here
        if (Object.keys(files).length) for (const [module, key] of Object.entries(job.fileKeys)) times[key] = files[module] ?? 0;
        const tested = Object.values(files).reduce((a, b) => a + b, 0);
        if (tested) times[job.overheadKey] = Math.max(0, seconds - tested);
      } else if (job.key) times[job.key] = seconds;
      resolve({ ...job, code, seconds, ...counts, times, notTested: notTested(output) });
    });
  });
}

const LOGS = path.join(ARTIFACTS, "test-logs");

async function main() {
  const serial = args.includes("--serial");
  const record = args.includes("--record-times");
  const workersArg = args.find((a) => a.startsWith("--workers="));
  const wanted = args.filter((a) => !a.startsWith("--"));
  const unknown = [...wanted.filter((w) => !(w in STAGES)),
    ...args.filter((a) => a.startsWith("--") && !["--fast", "--serial", "--record-times"].includes(a) && a !== workersArg)];
  if (unknown.length) {
    console.error(`unknown stage(s) or option(s): ${unknown.join(", ")}; stages: ${Object.keys(STAGES).join(", ")}; ` +
      "options: --fast, --serial, --workers=N, --record-times");
    process.exit(2);
  }
  fs.mkdirSync(LOGS, { recursive: true });
  const started = Date.now();
  const chosen = Object.keys(STAGES).filter((key) => wanted.length === 0 || wanted.includes(key));
  const times = loadTimes();
  const jobs = chosen.flatMap((key) => STAGES[key](times)).map((job) => ({ ...job, seconds: job.seconds ?? estimate(times, job.key) }));
  // Two workers by default: the suite waits on servers, kernels and a browser much of its time, so
  // two nearly halve the wall time on 2 cores, and every test runs beside another load (which is how
  // flaky timing shows up). `--serial`: one, its output live.
  const asked = serial ? 1 : Number(workersArg?.split("=")[1] ?? 2);
  if (!Number.isInteger(asked) || asked < 1) {
    console.error(`--workers takes a whole number of at least 1 (got ${workersArg})`);
    process.exit(2);
  }
  const workers = Math.min(asked, Math.max(1, jobs.length));  // one job alone gets every core and live output
  const live = workers === 1;
  // Side by side, each worker's torch gets its share of the cores: two processes that each start a
  // thread per core contend (measured on 2 cores, an hf-engine test beside a training test: 71 s and
  // 71 s with the default threads, 51 s and 61 s with one thread each). OMP_NUM_THREADS set by hand wins.
  const threads = workers > 1 && !process.env.OMP_NUM_THREADS
    ? { OMP_NUM_THREADS: String(Math.max(1, Math.floor(os.availableParallelism() / workers))) } : {};
  const planned = jobs.reduce((n, j) => n + j.seconds, 0);
  console.log(`[test] ${jobs.length} jobs, about ${(planned / 60).toFixed(0)} min of work by the last times, on ${workers} worker(s) ` +
    `(logs: ${path.relative(ROOT, LOGS)}/)`);
  const { results, busy } = await runJobs(jobs, workers, (job) => runJob(job, { live, env: threads }));
  const unrun = jobs.filter((_, i) => !results[i]).map((j) => j.name);
  if (unrun.length) results.push({ failed: unrun.length, name: `not run: ${unrun.join(", ")}` });

  console.log(`\n=== summary${fast ? " (fast tier)" : ""} ===`);
  for (const key of chosen) {
    const mine = results.filter((r) => r.stage === key);
    if (!mine.length) continue;
    const sum = (field) => mine.reduce((n, r) => n + r[field], 0);
    const ranNothing = sum("passed") === 0 && sum("failed") === 0;
    const failed = sum("failed") + (ranNothing ? 1 : 0);
    console.log(`${failed ? "FAIL" : "ok  "} ${STAGE_TITLES[key].padEnd(42)} ${String(sum("passed")).padStart(4)} passed ${String(failed).padStart(3)} failed` +
      `${sum("skipped") ? ` ${sum("skipped")} skipped` : ""}${ranNothing ? " (ran no test)" : ""}  ${sum("seconds").toFixed(0)} s in ${mine.length} job(s)`);
    for (const r of mine.filter((r) => r.failed)) console.log(`       failed: ${r.name} (log: ${path.relative(ROOT, path.join(LOGS, `${slug(r.name)}.log`))})`);
    if (ranNothing) results.push({ failed: 1 });
  }
  busy.forEach((lane, i) => console.log(`worker ${i + 1}: busy ${lane.seconds.toFixed(0)} s, ${lane.jobs.length} jobs`));
  const notTestedHere = new Map();
  for (const r of results) for (const [what, n] of r.notTested ?? []) notTestedHere.set(what, (notTestedHere.get(what) ?? 0) + n);
  if (notTestedHere.size) {
    console.log("\nnot tested here (this machine lacks the hardware; ART_HARDWARE overrides the detection):");
    for (const [what, n] of notTestedHere) console.log(`  ${what}: ${n} test${n === 1 ? "" : "s"} skipped`);
  }
  const measured = Object.assign({}, ...results.map((r) => r.times ?? {}));
  saveTimes(measured);
  if (record) {
    const cpu = os.cpus()[0]?.model.trim() ?? "unknown CPU";
    saveTimes(measured, COMMITTED_TIMES, `${cpu}, ${os.availableParallelism()} cores, ${workers} workers`);
    console.log(`[test] wrote ${path.relative(ROOT, COMMITTED_TIMES)}`);
  }
  const total = (key) => results.reduce((n, r) => n + (r[key] ?? 0), 0);
  console.log(`\n${total("passed")} passed, ${total("failed")} failed, ${total("skipped")} skipped in ${((Date.now() - started) / 60000).toFixed(1)} min`);
  process.exit(total("failed") ? 1 : 0);
}

main();
