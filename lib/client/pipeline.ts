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
import { checkTrainOptions, type SamplingThroughput, type StaleGroupCounts, TrainableModel, type TrainOptions } from "./model";

/** Options of {@link trainPipeline}. */
export interface PipelineOptions {
  /** The model to train (registered). */
  model: TrainableModel;
  /** Training steps to run (from the model's current step). */
  steps: number;
  /** The groups of one step, called once per step in order (its argument counts from the model's step at the start). */
  groups: (step: number) => TrajectoryGroup[];
  /**
   * Scores each training group once its rollouts are in, before its step trains: a judge such as
   * `(group) => rulerScoreGroup(group, { judge })` that sets each trajectory's reward. Evaluation
   * groups are not passed to it (their rewards are the environment's own).
   */
  scoreGroup?: (group: TrajectoryGroup) => void | Promise<void>;
  /** GRPO settings passed to `model.train`. */
  train?: Omit<TrainOptions, "progress" | "signal" | "staleGroupCounts" | "sampling" | "servePreviousDuringTraining">;
  /**
   * Every `every` steps (and after the last; and before the first, unless the history has a `val` row
   * at the starting step), run `groups()` at that step and log them as `val`.
   */
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

/** @internal The pipeline's option checks; `trainLoop` picks the options it shares from them. */
export const PipelineOptionsSchema = z.object({
  model: z.instanceof(TrainableModel, { message: "must be a TrainableModel" }),
  steps: z.number().int().min(0).max(1_000_000),
  groups: functionOption<(step: number) => TrajectoryGroup[]>(),
  scoreGroup: functionOption<(group: TrajectoryGroup) => void | Promise<void>>().optional(),
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
  return new PipelineRun(options).run();
}

/**
 * One run of {@link trainPipeline}. Three stages share its state: gathering (`gatherStage`: step
 * i's rollouts start once the trainer is at most k steps behind them), training (`trainStage`: each
 * step in order, on its gathered groups) and evaluation (`evaluate`: one at a time, pinned to its
 * step). A stop aborts every stage through `stop`; `run` returns only when nothing runs any more.
 */
class PipelineRun {
  private readonly model: TrainableModel;
  private readonly k: number;
  private readonly started = performance.now();
  private readonly slots: Slots;
  private readonly clock = new BusyClock();
  /** Aborted (with the reason) when the pipeline stops, for whatever reason. */
  private readonly stop = new AbortController();
  /**
   * What running requests are aborted with: an AbortError, which every client (openai's, the AI
   * SDK's) takes for a deliberate abort (no retries), while `failure` keeps why the pipeline stopped.
   */
  private readonly requests = new AbortController();
  private readonly whenStopped: Promise<never>;
  private failure: unknown;
  private first = 0;
  private state!: PipelineState;
  /** Everything started, so a stop can wait until nothing runs. */
  private readonly running = new Set<Promise<unknown>>();
  /** Wakes whoever waits for the trainer to move on (the gatherer's admission). */
  private moved: () => void = () => {};
  private movedSignal = new Promise<void>((resolve) => (this.moved = resolve));
  /** Each step's gathered groups; `ready[i]` resolves once step i's gathering has started. */
  private readonly batches: Array<Promise<TrajectoryGroup[]>> = [];
  private readonly admitted: Array<() => void> = [];
  private readonly ready: Array<Promise<void>>;
  /** Each batch's gathering, for its step's samplingTokensPerSecond. */
  private readonly sampling: SamplingThroughput[] = [];
  private trainedBatches = 0;
  private evalDone: Promise<void> = Promise.resolve();

  constructor(private readonly options: PipelineOptions) {
    this.model = options.model;
    this.k = options.maxStepsOffPolicy ?? 0;
    this.slots = new Slots(options.concurrency ?? DEFAULT_CONCURRENCY);
    this.ready = Array.from({ length: options.steps }, (_, i) => new Promise<void>((resolve) => (this.admitted[i] = resolve)));
    setMaxListeners(0, this.requests.signal); // every running request listens to it
    this.stop.signal.addEventListener("abort", () => {
      this.failure ??= this.stop.signal.reason;
      this.requests.abort(new DOMException("the training pipeline stopped", "AbortError"));
      this.announce();
    }, { once: true });
    this.whenStopped = stopped(this.stop.signal);
    this.whenStopped.catch(() => {});
  }

  async run(): Promise<PipelineResult> {
    const { options } = this;
    const onAbort = () => {
      const reason: unknown = options.signal?.reason;
      this.stop.abort(reason instanceof StoppedError ? reason
        : new StoppedError("trainPipeline: stopped by its signal; the model stays at its last committed step", { cause: reason }));
    };
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.first = await this.model.getStep();
    this.state = {
      committedStep: this.first, stepsDone: 0, steps: options.steps, gathering: [], queued: [], training: null, evaluating: null,
      staleDropped: 0, staleRetried: 0,
    };
    // The curve starts where the run starts: step 0 of a fresh run, or the step a warm start (SFT)
    // made, so it shows whether RL adds to it. A continued run was evaluated after its last step.
    const startUnvalidated = options.evaluate !== undefined &&
      (this.first === 0 || !(await this.model.historyRows()).some((r) => r.split === "val" && r.step === this.first));
    const initialEval = startUnvalidated ? this.evaluate(this.first) : Promise.resolve();
    this.track(this.gatherStage(initialEval).catch((error: unknown) => this.fail(error)));
    try {
      await this.trainStage(initialEval);
      await Promise.race([this.evalDone, this.whenStopped]);
    } catch (error) {
      this.fail(error);
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      this.announce();
      // Nothing may still run when the pipeline returns: every rollout, step and evaluation has settled.
      while (this.running.size) await Promise.allSettled([...this.running]);
    }
    if (this.failure !== undefined) throw this.failure;
    const s = this.clock.seconds;
    return {
      seconds: (performance.now() - this.started) / 1000, stepsTrained: this.state.stepsDone, firstStep: this.first,
      rolloutSeconds: s.rollout, trainSeconds: s.train, overlapSeconds: s.overlap, evalSeconds: s.eval,
      staleDropped: this.state.staleDropped, staleRetried: this.state.staleRetried,
    };
  }

  /** The gathering stage: step i's groups start once the trainer is at most k steps behind them. */
  private async gatherStage(initialEval: Promise<void>): Promise<void> {
    if (this.k === 0) await initialEval; // synchronous: the starting step is evaluated before its rollouts start
    for (let i = 0; i < this.options.steps; i++) {
      while (this.trainedBatches < i - this.k && !this.stopping) await this.movedSignal;
      if (this.stopping) break;
      const step = this.first + i;
      const groups = this.options.groups(step);
      const progress: StageProgress = { step, done: 0, total: 0, exceptions: 0 };
      this.state.gathering.push(progress);
      const gatherStarted = performance.now();
      this.batches[i] = this.track(this.gather(groups, `step ${step}`, progress, "rollouts").then((gathered) => {
        const tokens = gathered.reduce((n, g) => n + g.trajectories.reduce((m, t) => m + t.sampledTokens(), 0), 0);
        this.sampling[i] = { tokens, seconds: (performance.now() - gatherStarted) / 1000 };
        return gathered;
      }).finally(() => {
        this.state.gathering = this.state.gathering.filter((g) => g !== progress);
        if (!this.stopping) this.state.queued.push(step);
        this.report();
      }));
      this.admitted[i]!();
      this.report();
    }
  }

  /** The training stage: each step in order, on its groups once gathered; evaluations when due. */
  private async trainStage(initialEval: Promise<void>): Promise<void> {
    const { options, state } = this;
    if (this.k === 0) await initialEval;
    for (let i = 0; i < options.steps; i++) {
      const step = this.first + i;
      await Promise.race([this.ready[i]!, this.whenStopped]);
      const gathered = await Promise.race([this.batches[i]!, this.whenStopped]);
      if (this.stopping) break;
      state.queued = state.queued.filter((s) => s !== step);
      const counts = { dropped: 0, retried: 0 };
      const groups = await this.freshGroups(gathered, state.committedStep, counts);
      if (this.stopping) break;
      const reward = meanReward(groups);
      // A trajectory without sampled tokens (its agent never got to act) has nothing to train on, but
      // its reward stays in its group's baseline: the server trains the others against it. A group
      // with nothing to train at all is not sent (plain assistant messages train with
      // allowTrainingWithoutLogprobs).
      const plain = options.train?.allowTrainingWithoutLogprobs === true;
      const trainable = groups.filter((g) => g.trajectories.some((t) =>
        t.choices().length > 0 || (plain && t.messages().some((m) => m.role === "assistant"))));
      const result = trainable.length ? await this.trainStep(step, trainable, this.sampling[i], counts) : null;
      if (result) state.committedStep = result.step;
      state.stepsDone = i + 1;
      await options.onStep?.({ type: "train", step, reward, result });
      const due = options.evaluate && ((i + 1) % options.evaluate.every === 0 || i === options.steps - 1);
      // Synchronous: the evaluation runs before the next step's rollouts start, as it always has.
      if (due) {
        const evaluation = this.evaluate(state.committedStep);
        if (this.k === 0) await evaluation;
      }
      this.trainedBatches = i + 1;
      this.announce();
      this.report();
    }
  }

  /** One GRPO step on `groups`, reporting its gradient steps; rolled back by the server if the pipeline stops. */
  private async trainStep(step: number, groups: TrajectoryGroup[], sampling: SamplingThroughput | undefined,
    counts: StaleGroupCounts): Promise<TrainResult> {
    const { options } = this;
    this.state.training = { step, gradientStep: 0, gradientSteps: options.train?.gradientSteps ?? 1 };
    this.report();
    this.clock.change("training", 1);
    try {
      return await this.track(this.model.train(groups, {
        ...options.train, progress: false, signal: this.requests.signal, ...(sampling ? { sampling } : {}),
        ...(this.k > 0 ? { maxStepsOffPolicy: this.k, servePreviousDuringTraining: true, staleGroupCounts: counts } : {}),
        onEvent: (event) => {
          if (event.type === "progress" && this.state.training) {
            this.state.training = { step, gradientStep: event.gradientStep, gradientSteps: event.gradientSteps };
            this.report();
          }
          options.train?.onEvent?.(event);
        },
      }));
    } finally {
      this.clock.change("training", -1);
      this.state.training = null;
    }
  }

  /** The evaluation stage: one evaluation at a time, in order of steps, pinned to its step. */
  private evaluate(step: number): Promise<void> {
    const evaluation = this.options.evaluate!;
    const run = async () => {
      if (this.stopping) return;
      const progress = { step, done: 0, total: 0, exceptions: 0 };
      this.state.evaluating = progress;
      this.report();
      try {
        const groups = await this.model.atStep(step, () => this.gather(evaluation.groups(), `evaluation of step ${step}`, progress, "evals", step));
        if (this.stopping) return;
        const row = await this.model.log(groups, { split: "val", step });
        await this.options.onStep?.({ type: "eval", step, row });
      } finally {
        this.state.evaluating = null;
        this.report();
      }
    };
    this.evalDone = this.track(this.evalDone.then(run)).catch((error: unknown) => this.fail(error));
    return this.evalDone;
  }

  /** Runs every rollout of `groups`, keeping finished ones in each group in the order they finish. */
  private async gather(groups: TrajectoryGroup[], what: string, progress: { done: number; total: number; exceptions: number },
    stage: "rollouts" | "evals", step?: number): Promise<TrajectoryGroup[]> {
    const jobs = rolloutJobs(groups);
    progress.total = jobs.length;
    await runRollouts(jobs, {
      start: (source) => {
        this.clock.change(stage, 1);
        return this.rollout(source, step).catch((error: unknown) => {
          // A backend that closed or crashed under a rollout is the pipeline's end, not the environment's exception.
          const gone = this.model.backend.unusable?.();
          if (gone) this.fail(gone);
          throw error;
        }).finally(() => this.clock.change(stage, -1));
      },
      maxExceptions: this.options.maxExceptions,
      what,
      stopped: () => this.stopping,
      onFailure: (message, errors) => this.fail(new GatherError(message, errors)),
      onSettled: () => {
        progress.exceptions = groups.reduce((n, g) => n + g.exceptions.length, 0);
        progress.done += 1;
        this.report();
      },
    });
    const score = this.options.scoreGroup;
    if (score && stage === "rollouts" && !this.stopping) await Promise.all(groups.filter((g) => g.trajectories.length).map((g) => score(g)));
    return groups;
  }

  /** Runs one rollout under the shared limit, in a scope whose requests the stop aborts. */
  private rollout(source: TrajectorySource, step?: number): Promise<Trajectory> {
    return this.slots.run(() => {
      if (this.stopping) return Promise.reject(this.stop.signal.reason);
      return withCallScope(this.model, { signal: this.requests.signal, ...(step !== undefined ? { step } : {}) }, () =>
        source instanceof Trajectory ? Promise.resolve(source) : typeof source === "function" ? source() : source);
    });
  }

  /** A group too far behind: gathered again once (retry), or left out; counted either way. */
  private async freshGroups(groups: TrajectoryGroup[], committed: number, counts: StaleGroupCounts): Promise<TrajectoryGroup[]> {
    const kept: TrajectoryGroup[] = [];
    for (const group of groups) {
      const oldest = oldestStep(group);
      if (this.k === 0 || oldest === undefined || committed - oldest <= this.k) {
        kept.push(group);
        continue;
      }
      const rerunnable = group.sources.every((s) => typeof s === "function");
      if (this.options.staleGroups === "retry" && rerunnable) {
        counts.retried += 1;
        this.state.staleRetried += 1;
        const again = new TrajectoryGroup(group.sources);
        await this.gather([again], `step ${committed} (gathered again: it was ${committed - oldest} steps behind)`,
          { done: 0, total: 0, exceptions: 0 }, "rollouts");
        const now = oldestStep(again);
        if (now === undefined || committed - now <= this.k) {
          kept.push(again);
          continue;
        }
      }
      counts.dropped += 1;
      this.state.staleDropped += 1;
    }
    return kept;
  }

  private get stopping(): boolean {
    return this.stop.signal.aborted;
  }

  /** Stops the pipeline with `error` (the first one wins). */
  private fail(error: unknown): void {
    this.failure ??= error;
    if (!this.stopping) this.stop.abort(error);
    this.announce();
  }

  /** Wakes the gatherer waiting for the trainer. */
  private announce(): void {
    this.moved();
    this.movedSignal = new Promise<void>((resolve) => (this.moved = resolve));
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.running.add(p);
    void p.then(() => this.running.delete(p), () => this.running.delete(p));
    return p;
  }

  private report(): void {
    this.options.onProgress?.(this.state);
  }
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

