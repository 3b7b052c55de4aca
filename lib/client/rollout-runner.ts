/**
 * The one core that runs a batch of groups' rollouts, for {@link gatherTrajectoryGroups} and the
 * training pipeline alike: each group starts over (its ready trajectories, no exceptions), every
 * rollout runs under a shared limit, and each finished one lands in its group, or its error in the
 * group's `exceptions`, until more than `maxExceptions` have thrown. Internal (not exported by
 * index.ts): the public doors are those two.
 * @module
 */
import { Trajectory, type TrajectoryGroup, type TrajectorySource } from "../core/trajectory";

/** Rollouts running at once unless a caller says otherwise. */
export const DEFAULT_CONCURRENCY = 64;

/** At most `size` calls at once; the rest wait in order. */
export class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];
  constructor(size: number) {
    this.free = size;
  }
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free -= 1;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free += 1;
    }
  }
}

/** `maxExceptions` as a count of `total` rollouts: a fraction of them when below 1. */
export function exceptionLimit(maxExceptions: number | undefined, total: number): number {
  const m = maxExceptions ?? 0;
  return m > 0 && m < 1 ? Math.floor(m * total) : Math.floor(m);
}

/** A rollout of a group to run. */
export interface RolloutJob {
  group: TrajectoryGroup;
  source: TrajectorySource;
}

/** What {@link runRollouts} needs from its caller. */
export interface RolloutRun {
  /** Starts one rollout (under the caller's limit and stop). */
  start: (source: TrajectorySource) => Promise<Trajectory>;
  /** Rollouts that may throw before the gathering fails (see {@link exceptionLimit}). */
  maxExceptions?: number;
  /** Names the gathering in the error (e.g. "step 3"); none: the error starts with the count. */
  what?: string;
  /** True once a stop was asked for: a rollout that throws then is not counted as failing. */
  stopped?: () => boolean;
  /** Called once, when more rollouts threw than allowed: the message for a GatherError, and every error so far. */
  onFailure: (message: string, errors: unknown[]) => void;
  /** Called as each rollout settles: its trajectory, or the error it threw when that counted (not after a stop). */
  onSettled?: (job: RolloutJob, outcome: { trajectory?: Trajectory; error?: unknown }) => void;
}

/** Resets each group for a new gathering and lists the rollouts it has to run. */
export function rolloutJobs(groups: TrajectoryGroup[]): RolloutJob[] {
  for (const group of groups) {
    group.trajectories = group.sources.filter((s): s is Trajectory => s instanceof Trajectory);
    group.exceptions = [];
  }
  return groups.flatMap((group) => group.sources.filter((s) => !(s instanceof Trajectory)).map((source) => ({ group, source })));
}

/** Runs `jobs` (from {@link rolloutJobs}); returns every error the rollouts threw. */
export async function runRollouts(jobs: RolloutJob[], run: RolloutRun): Promise<unknown[]> {
  const limit = exceptionLimit(run.maxExceptions, jobs.length);
  const errors: unknown[] = [];
  let failed = false;
  await Promise.all(jobs.map(async (job) => {
    const outcome: { trajectory?: Trajectory; error?: unknown } = {};
    try {
      outcome.trajectory = await run.start(job.source);
      job.group.trajectories.push(outcome.trajectory);
    } catch (error) {
      if (run.stopped?.()) return;
      outcome.error = error;
      errors.push(error);
      job.group.exceptions.push(error);
      if (errors.length > limit && !failed) {
        failed = true;
        const first = errors[0] as Error;
        run.onFailure(`${run.what ? `${run.what}: ` : ""}${errors.length} of ${jobs.length} rollouts threw ` +
          `(maxExceptions ${run.maxExceptions ?? 0}); the first: ${first?.message ?? String(first)}\n${first?.stack ?? ""}`, errors);
      }
    } finally {
      run.onSettled?.(job, outcome);
    }
  }));
  return errors;
}
