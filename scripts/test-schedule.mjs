// How scripts/test.mjs spreads the suite over its workers: by measured time. Every test file's
// seconds are recorded after a run (.artifacts/test-logs/times.json, read first by the next run on
// this machine); a fresh clone starts from scripts/test-times.json, the times of a full run on the
// reference machine (`node scripts/test.mjs --record-times` rewrites it). A stage that can split
// (one process per file, or files packed into shards of a few minutes) becomes several jobs; the
// jobs go longest first to whichever worker is free (LPT list scheduling: within 4/3 of the best
// possible split, in practice within a job of it).
import fs from "node:fs";
import path from "node:path";
import { ARTIFACTS, ROOT } from "./project.mjs";

export const COMMITTED_TIMES = path.join(ROOT, "scripts", "test-times.json");
export const LAST_TIMES = path.join(ARTIFACTS, "test-logs", "times.json");
const UNKNOWN_FILE_S = 30; // a file no run has timed yet

/** The `seconds` of a times file, or none when it is missing or unreadable. */
function readSeconds(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")).seconds ?? {};
  } catch {
    return {};
  }
}

/** `{ key: s }` of the last run here, over the committed reference times. */
export function loadTimes() {
  return { ...readSeconds(COMMITTED_TIMES), ...readSeconds(LAST_TIMES) };
}

/** Writes this run's times over the last ones (a stage not run this time keeps its old times). */
export function saveTimes(measured, file = LAST_TIMES, machine = undefined) {
  const seconds = Object.fromEntries(Object.entries({ ...readSeconds(file), ...measured }).sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => [k, Math.round(v * 10) / 10]));
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify({ ...(machine ? { machine } : {}), seconds }, null, 1)}\n`);
}

/** The estimate of `key` (a stage's file, `stage:path`), or the default for an untimed one. */
export function estimate(times, key) {
  return times[key] ?? UNKNOWN_FILE_S;
}

/**
 * Packs `files` into shards (each one process) of about `target` seconds, longest first into the
 * least loaded shard; `overhead` is what a process costs before its first test (imports, a server
 * the module's tests share).
 */
export function packShards(files, secondsOf, { target, overhead = 0 }) {
  const total = files.reduce((s, f) => s + secondsOf(f), 0);
  const count = Math.max(1, Math.min(files.length, Math.round(total / target)));
  const shards = Array.from({ length: count }, () => ({ files: [], seconds: overhead }));
  for (const file of [...files].sort((a, b) => secondsOf(b) - secondsOf(a))) {
    const lightest = shards.reduce((best, s) => (s.seconds < best.seconds ? s : best));
    lightest.files.push(file);
    lightest.seconds += secondsOf(file);
  }
  return shards.filter((s) => s.files.length).map((s) => ({ ...s, files: s.files.sort() }));
}

/**
 * Runs `jobs` (each with `seconds`, its estimate) on `workers` workers, longest first to the first
 * free one; `run(job, worker)` resolves with the job's result. Jobs of one `group` never run at
 * once (the jobs that start vLLM: two vLLMs on 2 cores slowed each other from 520 to 850 s): a free
 * worker takes the longest job whose group is not running, and waits when only such jobs are left.
 * Resolves with the results in the jobs' order, and what each worker was busy with.
 */
export async function runJobs(jobs, workers, run) {
  const queue = jobs.map((job, index) => ({ job, index })).sort((a, b) => b.job.seconds - a.job.seconds);
  const results = new Array(jobs.length);
  const busy = Array.from({ length: workers }, () => ({ seconds: 0, jobs: [] }));
  const running = new Set();
  let finished = () => {};
  let oneFinished = new Promise((resolve) => (finished = resolve));
  const take = () => {
    const at = queue.findIndex(({ job }) => !job.group || !running.has(job.group));
    return at < 0 ? undefined : queue.splice(at, 1)[0];
  };
  await Promise.all(busy.map(async (lane, worker) => {
    while (queue.length) {
      const next = take();
      if (!next) {
        await oneFinished;  // only jobs of a running group are left: wait for a job to end
        continue;
      }
      if (next.job.group) running.add(next.job.group);
      const started = Date.now();
      results[next.index] = await run(next.job, worker);
      lane.seconds += (Date.now() - started) / 1000;
      lane.jobs.push(next.job.name);
      if (next.job.group) running.delete(next.job.group);
      finished();
      oneFinished = new Promise((resolve) => (finished = resolve));
    }
  }));
  return { results, busy };
}
