/**
 * Running rollouts in parallel under a concurrency limit, with a live progress line, collecting
 * failures up to a limit. And `retry` for flaky steps inside a rollout.
 * @module
 */
import { ProgressLine } from "./display";
import { Trajectory, TrajectoryGroup, type TrajectorySource } from "./trajectory";

/** Options of {@link gatherTrajectoryGroups} and {@link gatherTrajectories}. */
export interface GatherOptions {
  /** Rollouts that may throw before gathering fails: a count, or a fraction of all when below 1 (default 0). */
  maxExceptions?: number;
  /** Rollouts running at once (default 32). */
  concurrency?: number;
  /** Called for each finished group (e.g. to score it with a judge); may replace rewards. */
  afterEach?: (group: TrajectoryGroup) => void | Promise<void>;
  /** The progress line's label, or false for none (default "rollouts"). */
  progress?: string | false;
}

/** Gathering failed: more rollouts threw than `maxExceptions` allows. Carries the first error. */
export class GatherError extends Error {
  constructor(
    message: string,
    readonly errors: unknown[],
  ) {
    super(message);
    this.name = "GatherError";
  }
}

function start(source: TrajectorySource): Promise<Trajectory> {
  if (source instanceof Trajectory) return Promise.resolve(source);
  return typeof source === "function" ? source() : source;
}

/**
 * Runs every group's rollouts (at most `concurrency` at a time) and returns the groups with their
 * finished trajectories. The progress line shows done/total, the running mean reward, exceptions
 * and sampled tokens per second.
 */
export async function gatherTrajectoryGroups(groups: Iterable<TrajectoryGroup>, options: GatherOptions = {}): Promise<TrajectoryGroup[]> {
  const all = [...groups];
  const jobs = all.flatMap((group) => group.sources.filter((s) => !(s instanceof Trajectory)).map((source) => ({ group, source })));
  for (const group of all) group.trajectories = group.sources.filter((s): s is Trajectory => s instanceof Trajectory);
  const total = jobs.length;
  const limit = (options.maxExceptions ?? 0) < 1 && (options.maxExceptions ?? 0) > 0
    ? Math.floor((options.maxExceptions ?? 0) * total)
    : Math.floor(options.maxExceptions ?? 0);
  const progress = options.progress === false ? null : new ProgressLine(options.progress ?? "rollouts");
  const started = Date.now();
  const errors: unknown[] = [];
  let done = 0;
  let rewardSum = 0;
  let tokens = 0;
  let failed: GatherError | null = null;
  const pendingPerGroup = new Map(all.map((g) => [g, jobs.filter((j) => j.group === g).length]));
  const finishedGroups: Promise<void>[] = [];

  const state = () => {
    const seconds = Math.max(1e-3, (Date.now() - started) / 1000);
    const mean = done - errors.length > 0 ? (rewardSum / (done - errors.length)).toFixed(3) : "-";
    return { done, total, detail: `reward ${mean} · exceptions ${errors.length} · ${Math.round(tokens / seconds)} tok/s` };
  };

  const finishOne = (group: TrajectoryGroup) => {
    const left = (pendingPerGroup.get(group) ?? 1) - 1;
    pendingPerGroup.set(group, left);
    if (left === 0 && options.afterEach) finishedGroups.push(Promise.resolve(options.afterEach(group)));
  };

  let next = 0;
  const worker = async () => {
    while (next < jobs.length && !failed) {
      const job = jobs[next++]!;
      try {
        const trajectory = await start(job.source);
        job.group.trajectories.push(trajectory);
        rewardSum += trajectory.reward;
        tokens += trajectory.sampledTokens();
      } catch (error) {
        errors.push(error);
        job.group.exceptions.push(error);
        if (errors.length > limit && !failed) {
          const first = errors[0] as Error;
          failed = new GatherError(`${errors.length} of ${total} rollouts threw (maxExceptions ${options.maxExceptions ?? 0}); ` +
            `the first: ${first?.message ?? String(first)}\n${first?.stack ?? ""}`, errors);
        }
      }
      done += 1;
      progress?.update(state());
      finishOne(job.group);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency ?? 32, jobs.length)) }, worker));
  progress?.finish(state());
  if (failed) throw failed;
  if (!jobs.length && options.afterEach) for (const group of all) await options.afterEach(group);
  await Promise.all(finishedGroups);
  return all;
}

/** Like {@link gatherTrajectoryGroups} for loose trajectories (e.g. an evaluation); returns them. */
export async function gatherTrajectories(sources: Iterable<TrajectorySource>, options: Omit<GatherOptions, "afterEach"> = {}): Promise<Trajectory[]> {
  const [group] = await gatherTrajectoryGroups([new TrajectoryGroup(sources)], options);
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

/** Calls `fn` until it succeeds, up to `attempts` times, waiting longer after each failure. */
export async function retry<T>(fn: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
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
