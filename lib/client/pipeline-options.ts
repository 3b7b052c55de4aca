/**
 * What `trainPipeline` (pipeline.ts) takes, reports while it runs, and returns: its options (with
 * their zod checks), its progress state, the events of each step, and its result.
 * @module
 */
import { z } from "zod";
import { functionOption } from "../core/options";
import type { HistoryRow, TrainResult } from "../core/results";
import type { TrajectoryGroup } from "../core/trajectory";
import { TrainableModel } from "./model";
import type { TrainOptions } from "./train-inputs";

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
