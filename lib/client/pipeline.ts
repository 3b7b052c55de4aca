/**
 * The training pipeline under `trainLoop`, usable from a script: rollouts gather the groups of
 * step s + 1 (up to `maxStepsOffPolicy` steps ahead) while the trainer trains step s on groups
 * already gathered, and evaluation runs as its own stage. With `maxStepsOffPolicy: 0` it is the
 * synchronous loop: gather, train, evaluate, gather again.
 * @module
 */
import { setMaxListeners } from "node:events";
import { StoppedError } from "../core/errors";
import { parseOptions } from "../core/options";
import type { TrainResult } from "../core/results";
import { Trajectory, TrajectoryGroup, type TrajectorySource } from "../core/trajectory";
import { withCallScope } from "./call-scope";
import { GatherError } from "./gather";
import { DEFAULT_CONCURRENCY, rolloutJobs, runRollouts, Slots } from "./rollout-runner";
import type { TrainableModel } from "./model";
import { type PipelineOptions, PipelineOptionsSchema, type PipelineResult, type PipelineState, type StageProgress } from "./pipeline-options";
import { checkTrainOptions, type SamplingThroughput, type StaleGroupCounts } from "./train-inputs";

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

