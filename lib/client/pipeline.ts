/**
 * The training pipeline under `trainLoop`, usable from a script: rollouts gather the groups of
 * step s + 1 (up to `maxStepsOffPolicy` steps ahead) while the trainer trains step s on groups
 * already gathered, and evaluation runs as its own stage. With `maxStepsOffPolicy: 0` it is the
 * synchronous loop: gather, train, evaluate, gather again.
 * @module
 */
import { setMaxListeners } from "node:events";
import { z } from "zod";
import { StoppedError } from "../core/errors";
import { functionOption, parseOptions } from "../core/options";
import type { HistoryRow, TrainResult } from "../core/results";
import { Trajectory, TrajectoryGroup, type TrajectorySource } from "../core/trajectory";
import { withCallScope } from "./call-scope";
import { GatherError } from "./gather";
import { DEFAULT_CONCURRENCY, rolloutJobs, runRollouts, Slots } from "./rollout-runner";
import { checkTrainOptions, type SamplingThroughput, TrainableModel, type TrainOptions } from "./model";

/** Options of {@link trainPipeline}. */
export interface PipelineOptions {
  /** The model to train (registered). */
  model: TrainableModel;
  /** Training steps to run (from the model's current step). */
  steps: number;
  /** The groups of one step, called once per step in order (its argument counts from the model's step at the start). */
  groups: (step: number) => TrajectoryGroup[];
  /** GRPO settings passed to `model.train`. */
  train?: Omit<TrainOptions, "progress" | "signal" | "staleGroups" | "sampling" | "servePreviousDuringTraining">;
  /** Every `every` steps (and after the last; and before the first at step 0), run `groups()` at that step and log them as `val`. */
  evaluate?: {
    /** Evaluate every this many steps. */
    every: number;
    /** The evaluation's groups; `model.inferenceName()` inside them names the step evaluated. */
    groups: () => TrajectoryGroup[];
  };
  /**
   * How many steps behind the trained step a group's rollouts may have been sampled (default 0: the
   * synchronous loop). With k > 0 the rollouts of the next k steps run while a step trains, against
   * the latest committed step, so they never wait for training (and training rarely waits for them).
   */
  maxStepsOffPolicy?: number;
  /**
   * A group whose oldest turn is more than `maxStepsOffPolicy` steps behind when its step trains
   * (a rollout that asked an older step, or ran very long): `"retry"` gathers it again once (then
   * drops it), `"drop"` leaves it out (default). Both are counted in the step's metrics.
   */
  staleGroups?: "drop" | "retry";
  /** Rollouts running at once, over every stage (default 64). */
  concurrency?: number;
  /** Rollouts of one step (or evaluation) that may throw before the pipeline stops: a count, or a fraction when below 1 (default 0). */
  maxExceptions?: number;
  /** Stops the pipeline: running rollouts' requests are aborted, a step not committed rolls back, and it rejects with a StoppedError. */
  signal?: AbortSignal;
  /** Called whenever a stage moves (a rollout ends, a gradient step, a commit). */
  onProgress?: (state: PipelineState) => void;
  /** Called after each committed step, and after each evaluation is logged. */
  onStep?: (event: PipelineStepEvent) => void | Promise<void>;
}

/** How far one stage's rollouts (a step's gathering, or an evaluation) have come. */
export interface StageProgress {
  /** The step they belong to (gathered for, or evaluated at). */
  step: number;
  /** Rollouts finished (or failed). */
  done: number;
  /** Rollouts in all. */
  total: number;
  /** Rollouts that threw. */
  exceptions: number;
}

/** The step being trained and its gradient step. */
export interface TrainingProgress {
  /** The step whose groups train (it makes `step + 1`). */
  step: number;
  /** Gradient steps done (0 before the first). */
  gradientStep: number;
  /** Gradient steps in all. */
  gradientSteps: number;
}

/** Where each stage stands. */
export interface PipelineState {
  /** The model's latest committed step. */
  committedStep: number;
  /** Steps trained by this pipeline so far, of `steps`. */
  stepsDone: number;
  /** Steps to train. */
  steps: number;
  /** Steps whose groups are being gathered (several with `maxStepsOffPolicy` > 0). */
  gathering: StageProgress[];
  /** Steps whose groups are gathered and wait for the trainer. */
  queued: number[];
  /** The step being trained, if any. */
  training: TrainingProgress | null;
  /** The evaluation running, if any. */
  evaluating: StageProgress | null;
  /** Groups dropped for being too far behind, so far. */
  staleDropped: number;
  /** Groups gathered again for being too far behind, so far. */
  staleRetried: number;
}

/** A committed step, as {@link PipelineOptions.onStep} is told. */
export interface PipelineTrainEvent {
  /** Tells it from an evaluation. */
  type: "train";
  /** The step whose rollouts trained (the point on a reward curve). */
  step: number;
  /** Their mean reward. */
  reward: number;
  /** What `model.train` returned; null when nothing could train (no trajectory had sampled tokens). */
  result: TrainResult | null;
}

/** A logged evaluation, as {@link PipelineOptions.onStep} is told. */
export interface PipelineEvalEvent {
  /** Tells it from a training step. */
  type: "eval";
  /** The step evaluated. */
  step: number;
  /** Its `val` history row. */
  row: HistoryRow;
}

/** What {@link PipelineOptions.onStep} is told. */
export type PipelineStepEvent = PipelineTrainEvent | PipelineEvalEvent;

/** What a pipeline did, with each stage's busy time. */
export interface PipelineResult {
  /** Wall time. */
  seconds: number;
  /** Steps trained (into `firstStep + 1` ... ). */
  stepsTrained: number;
  /** The model's step when the pipeline started. */
  firstStep: number;
  /** Seconds with at least one training rollout running (the server sampling for training). */
  rolloutSeconds: number;
  /** Seconds with a step training. */
  trainSeconds: number;
  /** Seconds with both at once (the overlap the pipeline buys). */
  overlapSeconds: number;
  /** Seconds with an evaluation running. */
  evalSeconds: number;
  /** Groups dropped for being past `maxStepsOffPolicy`. */
  staleDropped: number;
  /** Groups gathered again for being past `maxStepsOffPolicy`. */
  staleRetried: number;
}

const PipelineOptionsSchema = z.object({
  model: z.instanceof(TrainableModel, { message: "must be a TrainableModel" }),
  steps: z.number().int().min(0).max(1_000_000),
  groups: functionOption<(step: number) => TrajectoryGroup[]>(),
  train: z.record(z.string(), z.unknown()).optional(),
  evaluate: z.object({ every: z.number().int().min(1), groups: functionOption<() => TrajectoryGroup[]>() }).strict().optional(),
  maxStepsOffPolicy: z.number().int().min(0).max(1000).optional(),
  staleGroups: z.enum(["drop", "retry"]).optional(),
  concurrency: z.number().int().min(1).max(100_000).optional(),
  maxExceptions: z.number().min(0).optional(),
  signal: z.instanceof(AbortSignal, { message: "must be an AbortSignal" }).optional(),
  onProgress: functionOption<(state: PipelineState) => void>().optional(),
  onStep: functionOption<(event: PipelineStepEvent) => void | Promise<void>>().optional(),
}).strict();

/** Seconds each stage was busy, and both at once. */
class BusyClock {
  private rollouts = 0;
  private training = 0;
  private evals = 0;
  private last = performance.now();
  readonly seconds = { rollout: 0, train: 0, overlap: 0, eval: 0 };
  private tick(): void {
    const now = performance.now();
    const dt = (now - this.last) / 1000;
    this.last = now;
    if (this.rollouts) this.seconds.rollout += dt;
    if (this.training) this.seconds.train += dt;
    if (this.rollouts && this.training) this.seconds.overlap += dt;
    if (this.evals) this.seconds.eval += dt;
  }
  change(stage: "rollouts" | "training" | "evals", by: 1 | -1): void {
    this.tick();
    this[stage] += by;
  }
}

/** The earliest step any of a group's finished rollouts was sampled at (undefined: none says). */
function oldestStep(group: TrajectoryGroup): number | undefined {
  const steps = group.trajectories.flatMap((t) => {
    const s = t.oldestPolicyStep();
    return s === undefined ? [] : [s];
  });
  return steps.length ? Math.min(...steps) : undefined;
}

/**
 * Trains `steps` GRPO steps, overlapping rollouts with training when `maxStepsOffPolicy` > 0. Each
 * step's groups come from `groups(step)`; its rollouts ask the model's bare name, which serves the
 * latest committed step (also while the next one trains). A stop (the signal, an error, a rollout
 * error past `maxExceptions`) aborts the running rollouts' requests, rolls back a step that has not
 * committed, waits until nothing runs, and rejects; the model stays at its last committed step.
 */
export async function trainPipeline(options: PipelineOptions): Promise<PipelineResult> {
  parseOptions("trainPipeline", PipelineOptionsSchema, options);
  checkTrainOptions("trainPipeline: option `train`:", options.train);
  const { model, steps } = options;
  const k = options.maxStepsOffPolicy ?? 0;
  const started = performance.now();
  const slots = new Slots(options.concurrency ?? DEFAULT_CONCURRENCY);
  const clock = new BusyClock();
  const stop = new AbortController();
  const onAbort = () => {
    const reason: unknown = options.signal?.reason;
    stop.abort(reason instanceof StoppedError ? reason
      : new StoppedError("trainPipeline: stopped by its signal; the model stays at its last committed step", { cause: reason }));
  };
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  const first = await model.getStep();
  const state: PipelineState = {
    committedStep: first, stepsDone: 0, steps, gathering: [], queued: [], training: null, evaluating: null,
    staleDropped: 0, staleRetried: 0,
  };
  const report = () => options.onProgress?.(state);
  // Everything started, so a stop can wait until nothing runs.
  const running = new Set<Promise<unknown>>();
  const track = <T>(p: Promise<T>): Promise<T> => {
    running.add(p);
    void p.then(() => running.delete(p), () => running.delete(p));
    return p;
  };
  // Wakes whoever waits for the trainer to move on (the gatherer's admission).
  let moved: () => void = () => {};
  let movedSignal = new Promise<void>((resolve) => (moved = resolve));
  const nextMove = () => movedSignal;
  const announce = () => {
    moved();
    movedSignal = new Promise<void>((resolve) => (moved = resolve));
  };
  let failure: unknown;
  const fail = (error: unknown) => {
    failure ??= error;
    if (!stop.signal.aborted) stop.abort(error);
    announce();
  };
  // What running requests are aborted with: an AbortError, which every client (openai's, the AI SDK's)
  // takes for a deliberate abort (no retries), while `failure` keeps why the pipeline stopped.
  const requests = new AbortController();
  setMaxListeners(0, requests.signal); // every running request listens to it
  stop.signal.addEventListener("abort", () => {
    failure ??= stop.signal.reason;
    requests.abort(new DOMException("the training pipeline stopped", "AbortError"));
    announce();
  }, { once: true });

  /** Runs one rollout under the shared limit, in a scope whose requests the stop aborts. */
  const rollout = (source: TrajectorySource, step?: number): Promise<Trajectory> =>
    slots.run(() => {
      if (stop.signal.aborted) return Promise.reject(stop.signal.reason);
      return withCallScope(model, { signal: requests.signal, ...(step !== undefined ? { step } : {}) }, () =>
        source instanceof Trajectory ? Promise.resolve(source) : typeof source === "function" ? source() : source);
    });

  /** Runs every rollout of `groups`, keeping finished ones in each group in the order they finish. */
  const gather = async (groups: TrajectoryGroup[], what: string, progress: { done: number; total: number; exceptions: number },
    stage: "rollouts" | "evals", step?: number): Promise<TrajectoryGroup[]> => {
    const jobs = rolloutJobs(groups);
    progress.total = jobs.length;
    await runRollouts(jobs, {
      start: (source) => {
        clock.change(stage, 1);
        return rollout(source, step).catch((error: unknown) => {
          // A backend that closed or crashed under a rollout is the pipeline's end, not the environment's exception.
          const gone = model.backend.unusable?.();
          if (gone) fail(gone);
          throw error;
        }).finally(() => clock.change(stage, -1));
      },
      maxExceptions: options.maxExceptions,
      what,
      stopped: () => stop.signal.aborted,
      onFailure: (message, errors) => fail(new GatherError(message, errors)),
      onSettled: () => {
        progress.exceptions = groups.reduce((n, g) => n + g.exceptions.length, 0);
        progress.done += 1;
        report();
      },
    });
    return groups;
  };

  // The evaluation stage: one evaluation at a time, in order of steps, pinned to its step.
  let evalDone: Promise<void> = Promise.resolve();
  const evaluate = (step: number): Promise<void> => {
    const evaluation = options.evaluate!;
    const run = async () => {
      if (stop.signal.aborted) return;
      const progress = { step, done: 0, total: 0, exceptions: 0 };
      state.evaluating = progress;
      report();
      try {
        const groups = await model.atStep(step, () => gather(evaluation.groups(), `evaluation of step ${step}`, progress, "evals", step));
        if (stop.signal.aborted) return;
        const row = await model.log(groups, { split: "val", step });
        await options.onStep?.({ type: "eval", step, row });
      } finally {
        state.evaluating = null;
        report();
      }
    };
    evalDone = track(evalDone.then(run)).catch(fail) as Promise<void>;
    return evalDone;
  };

  // The gathering stage: step i's groups start once the trainer is at most k steps behind them.
  const initialEval = options.evaluate && first === 0 ? evaluate(0) : Promise.resolve();
  const batches: Array<Promise<TrajectoryGroup[]>> = [];
  const sampling: SamplingThroughput[] = []; // each batch's gathering, for its step's samplingTokensPerSecond
  let trainedBatches = 0;
  const admitted = new Array<() => void>();
  const batchReady = (i: number) => new Promise<void>((resolve) => (admitted[i] = resolve));
  const ready = Array.from({ length: steps }, (_, i) => batchReady(i));
  track((async () => {
    if (k === 0) await initialEval;  // synchronous: step 0 is evaluated before its rollouts start
    for (let i = 0; i < steps; i++) {
      while (trainedBatches < i - k && !stop.signal.aborted) await nextMove();
      if (stop.signal.aborted) break;
      const groups = options.groups(first + i);
      const progress: StageProgress = { step: first + i, done: 0, total: 0, exceptions: 0 };
      state.gathering.push(progress);
      const gatherStarted = performance.now();
      const batch = track(gather(groups, `step ${first + i}`, progress, "rollouts").then((gathered) => {
        const tokens = gathered.reduce((n, g) => n + g.trajectories.reduce((m, t) => m + t.sampledTokens(), 0), 0);
        sampling[i] = { tokens, seconds: (performance.now() - gatherStarted) / 1000 };
        return gathered;
      }).finally(() => {
        state.gathering = state.gathering.filter((g) => g !== progress);
        if (!stop.signal.aborted) state.queued.push(first + i);
        report();
      }));
      batches[i] = batch;
      admitted[i]!();
      report();
    }
  })().catch(fail));

  /** A group too far behind: gathered again once (retry), or left out; counted either way. */
  const freshGroups = async (groups: TrajectoryGroup[], committed: number, counts: { dropped: number; retried: number }) => {
    const kept: TrajectoryGroup[] = [];
    for (const group of groups) {
      const oldest = oldestStep(group);
      if (k === 0 || oldest === undefined || committed - oldest <= k) {
        kept.push(group);
        continue;
      }
      const rerunnable = group.sources.every((s) => typeof s === "function");
      if (options.staleGroups === "retry" && rerunnable) {
        counts.retried += 1;
        state.staleRetried += 1;
        const again = new TrajectoryGroup(group.sources);
        await gather([again], `step ${committed} (gathered again: it was ${committed - oldest} steps behind)`,
          { done: 0, total: 0, exceptions: 0 }, "rollouts");
        const now = oldestStep(again);
        if (now === undefined || committed - now <= k) {
          kept.push(again);
          continue;
        }
      }
      counts.dropped += 1;
      state.staleDropped += 1;
    }
    return kept;
  };

  const whenStopped = stopped(stop.signal);
  whenStopped.catch(() => {});
  try {
    if (k === 0) await initialEval;
    for (let i = 0; i < steps; i++) {
      const step = first + i;
      await Promise.race([ready[i]!, whenStopped]);
      const gathered = await Promise.race([batches[i]!, whenStopped]);
      if (stop.signal.aborted) break;
      state.queued = state.queued.filter((s) => s !== step);
      const counts = { dropped: 0, retried: 0 };
      const groups = await freshGroups(gathered, state.committedStep, counts);
      if (stop.signal.aborted) break;
      const reward = meanReward(groups);
      // A role that never got to act (e.g. an operative whose spymaster broke the rules) has a
      // trajectory without sampled tokens: there is nothing to train on it, so it is left out.
      for (const group of groups) group.trajectories = group.trajectories.filter((t) => t.choices().length > 0);
      const trainable = groups.filter((g) => g.trajectories.length > 0);
      let result: TrainResult | null = null;
      if (trainable.length) {
        state.training = { step, gradientStep: 0, gradientSteps: options.train?.gradientSteps ?? 1 };
        report();
        clock.change("training", 1);
        try {
          result = await track(model.train(trainable, {
            ...options.train, progress: false, signal: requests.signal, sampling: sampling[i],
            ...(k > 0 ? { maxStepsOffPolicy: k, servePreviousDuringTraining: true, staleGroups: counts } : {}),
            onEvent: (event) => {
              if (event.type === "progress" && state.training) {
                state.training = { step, gradientStep: event.gradientStep, gradientSteps: event.gradientSteps };
                report();
              }
              options.train?.onEvent?.(event);
            },
          }));
        } finally {
          clock.change("training", -1);
          state.training = null;
        }
        state.committedStep = result.step;
      }
      state.stepsDone = i + 1;
      await options.onStep?.({ type: "train", step, reward, result });
      const due = options.evaluate && ((i + 1) % options.evaluate.every === 0 || i === steps - 1);
      // Synchronous: the evaluation runs before the next step's rollouts start, as it always has.
      if (due) {
        const evaluation = evaluate(state.committedStep);
        if (k === 0) await evaluation;
      }
      trainedBatches = i + 1;
      announce();
      report();
    }
    await Promise.race([evalDone, whenStopped]);
  } catch (error) {
    fail(error);
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    announce();
    // Nothing may still run when the pipeline returns: every rollout, step and evaluation has settled.
    while (running.size) await Promise.allSettled([...running]);
  }
  if (failure !== undefined) throw failure;
  const s = clock.seconds;
  return {
    seconds: (performance.now() - started) / 1000, stepsTrained: state.stepsDone, firstStep: first,
    rolloutSeconds: s.rollout, trainSeconds: s.train, overlapSeconds: s.overlap, evalSeconds: s.eval,
    staleDropped: state.staleDropped, staleRetried: state.staleRetried,
  };
}

function stopped(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

function meanReward(groups: TrajectoryGroup[]): number {
  const rewards = groups.flatMap((g) => g.trajectories.map((t) => t.reward));
  return rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : Number.NaN;
}

