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
  /** Trajectories in the step or evaluation. */
  trajectories?: number;
  /** Groups sent. */
  groups?: number;
  /** Groups that trained (the rest were skipped: see `groupsSkippedByReason`). */
  groupsTrained?: number;
  /** Groups skipped. */
  groupsSkipped?: number;
  /** Why groups were skipped: `equalRewards`, `missingTokens`, `tooLong`, `tooSmall`, `stale` (past `maxStepsOffPolicy`). */
  groupsSkippedByReason?: Record<string, number>;
  /** Trajectories in the trained groups. */
  trajectoriesTrained?: number;
  /** Sequences trained: one per trajectory, more when a trajectory was split into segments. */
  sequences?: number;
  /** Calls that did not continue the conversation before them, so started a new segment (each trains with its own prompt). */
  sequencesSplit?: number;
  /** Policy loss (GRPO) or the last batch's loss (SFT). */
  loss?: number;
  /** SFT: the first batch's loss. */
  lossFirst?: number;
  /** Gradient norm before clipping to `maxGradNorm`, mean over the gradient steps. */
  gradNorm?: number;
  /** Share of trained tokens whose importance ratio left `[1 - epsLow, 1 + epsHigh]`. */
  clipFraction?: number;
  /** KL between the sampler's and the trainer's logprobs (k3 estimator): how off-policy the step was. */
  approxKl?: number;
  /** KL to the base model (k3), with `klCoef` above 0; to step `klRefStep`'s adapter when that is set. */
  klRef?: number;
  /** Mean entropy of the policy's next-token distribution at the trained tokens; a fast fall means collapse. */
  entropy?: number;
  /**
   * Mean |trainer logprob - sampler logprob| per trained token, before the step's first update: how
   * exactly the trainer sees what the sampler sampled (engine kernels, dtype). Near 0 on-policy in fp32.
   */
  samplerLogprobDiffMean?: number;
  /** The largest such difference of one token (its importance ratio is e to this, at most). */
  samplerLogprobDiffMax?: number;
  /**
   * Mean importance ratio of the trained tokens in the step's last gradient step, as the loss used
   * it: how far the step's earlier gradient steps moved the policy (exactly 1 with one gradient step
   * and `samplerCorrection: "tis"`; with `none` it includes the sampler's own difference).
   */
  importanceRatioMean?: number;
  /** The largest such ratio of one token (beyond `1 + epsHigh` it was clipped). */
  importanceRatioMax?: number;
  /**
   * Tokens the trainer's passes ran per second (prompts and completions, without padding): every
   * pass, the gradient passes and those without a gradient (the KL reference's, the start-of-step
   * logprobs of later gradient steps, truncated tokens' kept sets).
   */
  trainerTokensPerSecond?: number;
  /** Tokens the trainer's passes ran (what `trainerTokensPerSecond` divides). */
  trainerTokens?: number;
  /** Completion tokens the step's rollouts sampled per second of their gathering (measured by `trainLoop`/`trainPipeline`). */
  samplingTokensPerSecond?: number;
  /** Mean truncated importance weight of `samplerCorrection: "tis"` (1: the sampler agreed; 1 without it). */
  samplerWeightMean?: number;
  /**
   * Staleness: how many steps before the step that trains them its trained tokens were sampled
   * (0: on-policy). Measured from each turn's `policyStep`; absent when no turn says its step.
   */
  policyLagMin?: number;
  /** Mean policy lag per trained token. */
  policyLagMean?: number;
  /** The largest policy lag of a trained turn (a pipelined `trainLoop` keeps it at most `maxStepsOffPolicy`). */
  policyLagMax?: number;
  /** Pipelined `trainLoop`: groups it dropped before this step for being past `maxStepsOffPolicy`. */
  groupsDroppedStale?: number;
  /** Pipelined `trainLoop`: groups it gathered again before this step for being past `maxStepsOffPolicy`. */
  groupsRetriedStale?: number;
  /** Completion tokens the step trained on. */
  tokensTrained?: number;
  /** SFT: tokens learned from. */
  tokens?: number;
  /** SFT: conversations learned from. */
  conversations?: number;
  /** Optimizer steps taken. */
  gradientSteps?: number;
  /** `grpo` or `sft` for training rows. */
  kind?: string;
  /** Set when the step trained nothing (e.g. every group had equal rewards): why. */
  nothingTrained?: string;
  /** One line per skipped group or sequence, naming it and why. */
  skipDetails?: string[];
  /** Seconds spent turning the trajectories into token sequences. */
  tokenizeSeconds?: number;
  /** Seconds of forward and backward passes (and optimizer steps). */
  forwardBackwardSeconds?: number;
  /** Seconds writing the checkpoint. */
  saveSeconds?: number;
  /** Seconds until the new adapter served. */
  reloadSeconds?: number;
  /** vllm engine: seconds putting vLLM to sleep before training. */
  sleepSeconds?: number;
  /** vllm engine: seconds waking vLLM after training. */
  wakeSeconds?: number;
  /** The step's wall seconds on the server, from checking its data to serving the new adapter. */
  stepSeconds?: number;
  /** Wall seconds the step's rollouts took to gather (measured by `trainLoop` and `trainPipeline`). */
  samplingSeconds?: number;
  /** The price the step was costed at: US dollars per hour of the server's machine. */
  gpuCostPerHourUsd?: number;
  /** What the step cost: its `samplingSeconds` and `stepSeconds` at `gpuCostPerHourUsd` (absent when no price is set). */
  costUsd?: number;
  /** Trajectories of plain assistant messages the step trained (`allowTrainingWithoutLogprobs`). */
  unsampledTrajectoriesTrained?: number;
  /**
   * True when the step started with fresh optimizer moments (`resetOptimizer`; by default the first
   * step after a step of the other kind, e.g. the first RL step after SFT).
   */
  optimizerReset?: boolean;
  /**
   * Truncated tokens (top-p, top-k, min-p) sampled by an earlier step whose checkpoint was gone, so
   * their kept sets were the policy's at the step's start instead of their sampler's (approximate).
   */
  truncatedStandIns?: number;
  /** Judge calls made for the step's (or the logged) groups: {@link rulerScoreGroup}'s, or any recorded with `recordJudgeUsage`. */
  judgeCalls?: number;
  /** Their prompt tokens, as the judge reported them. */
  judgePromptTokens?: number;
  /** Their completion tokens. */
  judgeCompletionTokens?: number;
  /** What they cost at the judge's `pricing` (absent when a judge had none). */
  judgeCostUsd?: number;
  /** Your trajectories' metrics (means; booleans as rates), under the names you gave them. */
  [metric: string]: unknown;
}

/** One row of a model's history: a training step (`split: "train"` or `"sft"`) or a logged split. */
export interface HistoryRow extends StepMetrics {
  /** The step the trajectories were sampled at (a training row: the step it trained from). */
  step: number;
  /** `train` or `sft` for a training step; the name given to `model.log` (e.g. `val`) for an evaluation. */
  split: string;
  /** Unix time in seconds. */
  time?: number;
  /** A training row: the step it produced. */
  trainedIntoStep?: number;
}

/** A line streamed while a step trains. */
export type TrainEvent =
  | {
    /** The step started. */
    type: "start";
    /** The step it trains from. */
    fromStep: number;
    /** The step it will produce. */
    step: number;
    /** The batch's reward statistics and its group, trajectory and sequence counts, as in {@link StepMetrics}. */
    [metric: string]: unknown;
  }
  | {
    /** One gradient step finished. */
    type: "progress";
    /** Which gradient step, from 1. */
    gradientStep: number;
    /** Gradient steps in this training step. */
    gradientSteps: number;
    /** Its policy loss. */
    loss: number;
    /** Its gradient norm before clipping. */
    gradNorm: number;
    /** Its learning rate. */
    lr: number;
    /** Its clip fraction, approximate KL and entropy, as in {@link StepMetrics}. */
    [metric: string]: unknown;
  }
  | {
    /** Advice about the batch (e.g. groups with equal rewards). */
    type: "warning";
    /** What to know, in a sentence. */
    message: string;
    /** One line per group or trajectory concerned. */
    details?: string[];
  }
  | {
    /** The step committed. */
    type: "result";
    /** The new step. */
    step: number;
    /** Its history row. */
    metrics: HistoryRow;
  };

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
  /** The model's name. */
  name: string;
  /** The project it belongs to. */
  project: string;
  /** The base model its adapter trains on. */
  baseModel: string;
  /** The latest step (0 for a new model). */
  step: number;
  /** The name to send to the OpenAI endpoint for the latest step. */
  inferenceName: string;
  /** Its LoRA configuration, fixed at the first registration. */
  lora: {
    /** Rank. */
    r: number;
    /** Scaling alpha. */
    alpha: number;
    /** Dropout. */
    dropout: number;
    /** Adapted module names. */
    targetModules: string[];
  };
  /** Its folder on the server. */
  path: string;
  /** True while a step trains. */
  training: boolean;
  /** True when registration found the model on disk and resumed it. */
  resumed?: boolean;
  /** The checkpoint it was forked from ({@link RemoteBackend.forkCheckpoint}), if it was. */
  forkedFrom?: ForkOrigin;
  /** Where its history rows are reported ({@link TrainableModelOptions.report}): one entry per tracker. */
  reporters: ReporterStatus[];
}

/** An experiment tracker a model's history rows are sent to, by the server. */
export type Tracker = "wandb" | "trackio";

/** How a model's reporter to one tracker is doing. */
export interface ReporterStatus {
  /** The tracker. */
  tracker: Tracker;
  /**
   * `starting` while it opens its run (it may wait on a network), `running`, `failed` (it stopped;
   * training went on, the history on the server is complete), `closed` when the server stopped.
   */
  state: "starting" | "running" | "failed" | "closed";
  /** History rows sent so far (all of them, once the tracker has caught up). */
  rowsSent: number;
  /** Where the run can be seen: its URL, an offline run's folder, or the Trackio project. */
  location?: string;
  /** Why it failed. */
  error?: string;
}

/** The checkpoint a model was forked from. */
export interface ForkOrigin {
  /** The parent's project. */
  project: string;
  /** The parent's name. */
  name: string;
  /** The parent's step the fork started from (the fork's first step number too). */
  step: number;
}

/** What `deleteCheckpoints` did. */
export interface DeleteCheckpointsResult {
  /** Steps whose checkpoints were deleted. */
  deleted: number[];
  /** Steps kept. */
  kept: number[];
  /** The best step by `keepBestBy`, or null when no row has that metric. */
  bestStep: number | null;
  /** The metric it ranked by. */
  metric?: string;
  /** Set when only the latest step was kept, saying why. */
  note?: string | null;
}
