/**
 * Running rollouts in parallel under a concurrency limit, with a live progress line, collecting
 * failures up to a limit. And `retry` for flaky steps inside a rollout.
 * @module
 */
import { z } from "zod";
import { ArtError, BadTrajectoryError } from "../core/errors";
import { functionOption, parseOptions } from "../core/options";
import { Trajectory, TrajectoryGroup, type TrajectorySource } from "../core/trajectory";
import { ProgressLine } from "../display/progress-line";
import { DEFAULT_CONCURRENCY, rolloutJobs, runRollouts, Slots } from "./rollout-runner";

/** Options of {@link gatherTrajectoryGroups} and {@link gatherTrajectories}. */
export interface GatherOptions {
  /** Rollouts that may throw before gathering fails: a count, or a fraction of all when below 1 (default 0). */
  maxExceptions?: number;
  /** Rollouts running at once (default 64, as in trainLoop and trainPipeline). */
  concurrency?: number;
  /** Called for each finished group (e.g. to score it with a judge); may replace rewards. */
  afterEach?: (group: TrajectoryGroup) => void | Promise<void>;
  /** The progress line's label, or false for none (default "rollouts"). */
  progress?: string | false;
  /** Called as rollouts finish (and once before the first), e.g. to show progress of your own. */
  onProgress?: (state: GatherProgress) => void;
}

/** Where a gathering stands: rollouts finished of all, their mean reward so far, exceptions. */
export interface GatherProgress {
  /** Rollouts finished (or failed). */
  done: number;
  /** Rollouts in all. */
  total: number;
  /** Mean reward of the finished rollouts (NaN before the first). */
  reward: number;
  /** Rollouts that threw so far. */
  exceptions: number;
}

const GatherOptionsSchema = z.object({
  maxExceptions: z.number().min(0).optional(),
  concurrency: z.number().int().min(1).max(100_000).optional(),
  afterEach: functionOption<(group: TrajectoryGroup) => void | Promise<void>>().optional(),
  progress: z.union([z.string(), z.literal(false)]).optional(),
  onProgress: functionOption<(state: GatherProgress) => void>().optional(),
}).strict();

/** Gathering failed: more rollouts threw than `maxExceptions` allows. Carries every error; `cause` is the first. */
export class GatherError extends ArtError {
  constructor(
    message: string,
    /** Every error the rollouts threw (the first is also `cause`). */
    readonly errors: unknown[],
  ) {
    super(message, { cause: errors[0] });
  }
}

function start(source: TrajectorySource): Promise<Trajectory> {
  if (source instanceof Trajectory) return Promise.resolve(source);
  return typeof source === "function" ? source() : source;
}

/**
 * Runs every group's rollouts (at most `concurrency` at a time) and returns the groups with their
 * finished trajectories. A group gathered again starts over (its exceptions too). The progress
 * line shows done/total, the running mean reward, exceptions and sampled tokens per second.
 */
export async function gatherTrajectoryGroups(groups: Iterable<TrajectoryGroup>, options: GatherOptions = {}): Promise<TrajectoryGroup[]> {
  return gather("gatherTrajectoryGroups", groups, options);
}

async function gather(call: string, groups: Iterable<TrajectoryGroup>, input: GatherOptions): Promise<TrajectoryGroup[]> {
  const options = parseOptions(call, GatherOptionsSchema, input);
  if (groups == null || typeof (groups as Iterable<unknown>)[Symbol.iterator] !== "function") {
    throw new BadTrajectoryError(`${call}: expected an array of TrajectoryGroup`);
  }
  const all = [...groups];
  all.forEach((group, i) => {
    if (!(group instanceof TrajectoryGroup)) throw new BadTrajectoryError(`${call}: item ${i} is not a TrajectoryGroup (wrap rollouts in new TrajectoryGroup([...]))`);
  });
  const jobs = rolloutJobs(all);
  const total = jobs.length;
  const progress = options.progress === false ? null : new ProgressLine(options.progress ?? "rollouts");
  const started = Date.now();
  let done = 0;
  let errors = 0;
  let rewardSum = 0;
  let tokens = 0;
  let failed: GatherError | null = null;
  const pendingPerGroup = new Map(all.map((g) => [g, jobs.filter((j) => j.group === g).length]));
  const finishedGroups: Promise<void>[] = [];

  // Mean reward of the rollouts that finished without throwing (NaN before the first).
  const meanReward = () => (done - errors > 0 ? rewardSum / (done - errors) : Number.NaN);
  const state = () => {
    const seconds = Math.max(1e-3, (Date.now() - started) / 1000);
    const mean = meanReward();
    return { done, total, detail: `reward ${Number.isNaN(mean) ? "-" : mean.toFixed(3)} · exceptions ${errors} · ${Math.round(tokens / seconds)} tok/s` };
  };

  const report = () => options.onProgress?.({ done, total, reward: meanReward(), exceptions: errors });
  report();

  const slots = new Slots(options.concurrency ?? DEFAULT_CONCURRENCY);
  // Once gathering has failed, rollouts not yet started do not start.
  const notStarted = new Error("gathering stopped");
  await runRollouts(jobs, {
    start: (source) => slots.run(() => (failed ? Promise.reject(notStarted) : start(source))),
    maxExceptions: options.maxExceptions,
    stopped: () => failed !== null, // after the failure, rollouts that end are not counted (as in the pipeline)
    onFailure: (message, all) => {
      failed = new GatherError(message, all);
    },
    onSettled: (job, { trajectory, error }) => {
      if (trajectory) {
        rewardSum += trajectory.reward;
        tokens += trajectory.sampledTokens();
      } else if (error === undefined) return; // not started, or ended after the failure: not counted
      else errors += 1;
      done += 1;
      progress?.update(state());
      report();
      const left = (pendingPerGroup.get(job.group) ?? 1) - 1;
      pendingPerGroup.set(job.group, left);
      if (left === 0 && options.afterEach && !failed) finishedGroups.push(Promise.resolve(options.afterEach(job.group)));
    },
  });
  progress?.finish(state());
  if (failed) throw failed;
  if (!jobs.length && options.afterEach) for (const group of all) await options.afterEach(group);
  await Promise.all(finishedGroups);
  return all;
}

/** Like {@link gatherTrajectoryGroups} for loose trajectories (e.g. an evaluation); returns them. */
export async function gatherTrajectories(sources: Iterable<TrajectorySource>, options: Omit<GatherOptions, "afterEach"> = {}): Promise<Trajectory[]> {
  if (sources == null || typeof (sources as Iterable<unknown>)[Symbol.iterator] !== "function") {
    throw new BadTrajectoryError("gatherTrajectories: expected an array of rollouts (functions returning a Trajectory)");
  }
  const [group] = await gather("gatherTrajectories", [new TrajectoryGroup(sources)], options);
  return group!.trajectories;
}

/** Options of {@link retry}. */
export interface RetryOptions {
  /** Attempts in all (default 3). */
  attempts?: number;
  /** Milliseconds before the second attempt (default 250). */
  delay?: number;
  /** Factor applied to the delay after each failure (default 2). */
  backoff?: number;
  /** Which errors to retry (default: all). */
  on?: (error: unknown) => boolean;
}

const RetryOptionsSchema = z.object({
  attempts: z.number().int().min(1).max(1000).optional(),
  delay: z.number().min(0).max(3_600_000).optional(),
  backoff: z.number().min(1).max(100).optional(),
  on: functionOption<(error: unknown) => boolean>().optional(),
}).strict();

/** Calls `fn` until it succeeds, up to `attempts` times, waiting longer after each failure. */
export async function retry<T>(fn: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  options = parseOptions("retry", RetryOptionsSchema, options);
  const attempts = options.attempts ?? 3;
  let delay = options.delay ?? 250;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (attempt >= attempts || (options.on && !options.on(error))) throw error;
      await new Promise((r) => setTimeout(r, delay));
      delay *= options.backoff ?? 2;
    }
  }
}
