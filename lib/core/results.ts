/**
 * What training calls return, as the TypeScript API names it (camelCase). The server's own
 * metrics get camelCase names (`reward_std` -> `rewardStd`, `tokenize_s` -> `tokenizeSeconds`);
 * the metrics your trajectories carry keep exactly the names you gave them.
 * @module
 */

/** Metrics of a step or an evaluation: the server's (typed here) and your trajectories' means. */
export interface StepMetrics {
  /** Mean reward of the trajectories. */
  reward?: number;
  /** Population standard deviation of the rewards. */
  rewardStd?: number;
  trajectories?: number;
  groups?: number;
  groupsTrained?: number;
  groupsSkipped?: number;
  /** Why groups were skipped: `equalRewards`, `missingTokens`, `tooLong`, `tooSmall`. */
  groupsSkippedByReason?: Record<string, number>;
  trajectoriesTrained?: number;
  sequences?: number;
  sequencesSplit?: number;
  /** Policy loss (GRPO) or the last batch's loss (SFT). */
  loss?: number;
  /** SFT: the first batch's loss. */
  lossFirst?: number;
  gradNorm?: number;
  clipFraction?: number;
  approxKl?: number;
  klRef?: number;
  entropy?: number;
  tokensTrained?: number;
  /** SFT: tokens learned from. */
  tokens?: number;
  /** SFT: conversations learned from. */
  conversations?: number;
  gradientSteps?: number;
  /** `grpo` or `sft` for training rows. */
  kind?: string;
  /** Set when the step trained nothing (e.g. every group had equal rewards): why. */
  nothingTrained?: string;
  skipDetails?: string[];
  tokenizeSeconds?: number;
  forwardBackwardSeconds?: number;
  saveSeconds?: number;
  reloadSeconds?: number;
  sleepSeconds?: number;
  wakeSeconds?: number;
  /** Your trajectories' metrics (means; booleans as rates), under the names you gave them. */
  [metric: string]: unknown;
}

/** One row of a model's history: a training step (`split: "train"` or `"sft"`) or a logged split. */
export interface HistoryRow extends StepMetrics {
  /** The step the trajectories were sampled at (a training row: the step it trained from). */
  step: number;
  split: string;
  /** Unix time in seconds. */
  time?: number;
  /** A training row: the step it produced. */
  trainedIntoStep?: number;
}

/** A line streamed while a step trains. */
export type TrainEvent =
  | { type: "start"; fromStep: number; step: number; [metric: string]: unknown }
  | { type: "progress"; gradientStep: number; gradientSteps: number; loss: number; gradNorm: number; lr: number; [metric: string]: unknown }
  | { type: "warning"; message: string; details?: string[] }
  | { type: "result"; step: number; metrics: HistoryRow };

/** The result of a training step (`model.train` or `model.trainSft`). */
export interface TrainResult {
  /** The new step (served as `name@step`). */
  step: number;
  /** The step it trained from, where the rollouts were sampled (the history row's `step`). */
  fromStep: number;
  /** Reward statistics, skipped groups, tokens trained, losses and timings of the step. */
  metrics: StepMetrics;
  /** Every line the server streamed. */
  events: TrainEvent[];
}

/** A model as the server registered it. */
export interface RegisteredModel {
  name: string;
  project: string;
  baseModel: string;
  /** The latest step (0 for a new model). */
  step: number;
  /** The name to send to the OpenAI endpoint for the latest step. */
  inferenceName: string;
  lora: { r: number; alpha: number; dropout: number; targetModules: string[] };
  /** Its folder on the server. */
  path: string;
  /** True while a step trains. */
  training: boolean;
  /** True when registration found the model on disk and resumed it. */
  resumed?: boolean;
}

/** What `deleteCheckpoints` did. */
export interface DeleteCheckpointsResult {
  deleted: number[];
  kept: number[];
  /** The best step by `keepBestBy`, or null when no row has that metric. */
  bestStep: number | null;
  /** The metric it ranked by. */
  metric?: string;
  /** Set when only the latest step was kept, saying why. */
  note?: string | null;
}
