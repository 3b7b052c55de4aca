// scripts/test-schedule.mjs: how `npm test` spreads its jobs over two workers by measured time.
import assert from "node:assert/strict";
import path from "node:path";
import { describe, it } from "node:test";
import { pathToFileURL } from "node:url";
import { ROOT } from "../support/helpers";

type Shard = { files: string[]; seconds: number };
type Job = { name: string; seconds: number; group?: string };
// A JavaScript module of the scripts (no types): what the tests use of it.
type Schedule = {
  packShards(files: string[], secondsOf: (f: string) => number, options: { target: number; overhead?: number }): Shard[];
  runJobs<R>(jobs: Job[], workers: number, run: (job: Job, worker: number) => Promise<R>): Promise<{ results: R[]; busy: Array<{ seconds: number; jobs: string[] }> }>;
};
const loaded: Promise<Schedule> = import(pathToFileURL(path.join(ROOT, "scripts", "test-schedule.mjs")).href);

describe("packing test files into shards", () => {
  const times: Record<string, number> = { a: 300, b: 200, c: 100, d: 100, e: 50, f: 50 };
  it("makes about total/target shards, each near the mean, every file in exactly one", async () => {
    const schedule = await loaded;
    const shards = schedule.packShards(Object.keys(times), (f) => times[f]!, { target: 200, overhead: 10 });
    assert.equal(shards.length, 4);
    assert.deepEqual(shards.flatMap((s) => s.files).sort(), Object.keys(times));
    for (const s of shards) assert.ok(s.seconds >= 160 && s.seconds <= 310, `${s.files} ${s.seconds}`);
  });
  it("keeps one shard when the files are fewer seconds than the target", async () => {
    const schedule = await loaded;
    assert.equal(schedule.packShards(Object.keys(times), (f) => times[f]!, { target: 10_000 }).length, 1);
  });
});

describe("running jobs on workers", () => {
  it("starts the longest first, gives each free worker the next, and returns results in the jobs' order", async () => {
    const jobs = [{ name: "short", seconds: 1 }, { name: "long", seconds: 9 }, { name: "mid", seconds: 5 }, { name: "tiny", seconds: 0.5 }];
    const order: string[] = [];
    const schedule = await loaded;
    const { results, busy } = await schedule.runJobs(jobs, 2, async (job, worker) => {
      order.push(job.name);
      await new Promise((resolve) => setTimeout(resolve, job.seconds * 5));
      return `${job.name}@${worker}`;
    });
    assert.deepEqual(order.slice(0, 2), ["long", "mid"]);
    assert.deepEqual(results.map((r) => r.split("@")[0]), ["short", "long", "mid", "tiny"]);
    assert.equal(busy.reduce((n, w) => n + w.jobs.length, 0), 4);
    // the worker with the long job runs nothing else: the others fit beside it
    assert.ok(busy.some((w) => w.jobs.length === 1 && w.jobs[0] === "long"), JSON.stringify(busy));
  });

  it("never runs two jobs of one group at once (one vLLM at a time), and still runs every job", async () => {
    const jobs = [{ name: "vllm-a", seconds: 9, group: "vllm" }, { name: "vllm-b", seconds: 8, group: "vllm" }, { name: "other", seconds: 1 }];
    const schedule = await loaded;
    let inGroup = 0;
    let most = 0;
    const { results } = await schedule.runJobs(jobs, 2, async (job) => {
      if (job.group) most = Math.max(most, ++inGroup);
      await new Promise((resolve) => setTimeout(resolve, job.seconds * 5));
      if (job.group) inGroup--;
      return job.name;
    });
    assert.equal(most, 1);
    assert.deepEqual(results, ["vllm-a", "vllm-b", "other"]);
  });
});
