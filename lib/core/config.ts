/**
 * Training configurations as the TypeScript API takes them (camelCase, range-checked), and their
 * wire form (snake_case, see wire.ts). Left-out fields take the server's defaults.
 * @module
 */
import { z } from "zod";

/** LoRA configuration of a trainable model. */
export interface LoraConfig {
  /** Rank, 1-512 (default 8). */
  r?: number;
  /** Scaling alpha, 1-4096 (default 16). */
  alpha?: number;
  /**
   * Dropout on the adapter's input, 0 to below 1 (default 0): active in the trainer's gradient passes
   * (SFT and RL), never in serving or the trainer's scoring passes. In RL the gradient pass is then
   * noisier than the policy it is compared with (one clean pass per micro-batch), so ratios start
   * off 1: keep 0 unless SFT overfits.
   */
  dropout?: number;
  /** Module names to adapt (default every attention and MLP projection). */
  targetModules?: string[];
}

/** @internal The zod schema that checks a {@link LoraConfig} (the interface documents each field). */
export const LoraConfigSchema = z.object({
  r: z.number().int().min(1).max(512).optional(),
  alpha: z.number().int().min(1).max(4096).optional(),
  dropout: z.number().min(0).lt(1).optional(),
  targetModules: z.array(z.string().min(1).max(128)).min(1).max(64).optional(),
}).strict();

/** GRPO settings of one training step (the server's defaults apply to what is left out). */
export interface GrpoConfig {
  /** Adam learning rate, above 0 and at most 1 (default 5e-6; LoRA on small models likes 1e-4 to 1e-3). */
  learningRate?: number;
  /** `ppo` (clipped ratio, default) or `cispo` (clipped importance weights, no dead tokens). */
  loss?: "ppo" | "cispo";
  /** Lower clip range of the ratio, 0-1 (default 0.2 per token; GSPO's 3e-4 with `importanceSampling: "sequence"`). */
  epsLow?: number;
  /** Upper clip range of the ratio, 0-10 (default 0.28 per token; GSPO's 4e-4 with `importanceSampling: "sequence"`). */
  epsHigh?: number;
  /** Weight of the KL penalty to the base model, 0-100 (default 0: none). */
  klCoef?: number;
  /**
   * Divide advantages by the group's reward standard deviation (default true, except with
   * `lengthNormalization: "constant"`: Dr. GRPO as published leaves the division out).
   */
  scaleRewards?: boolean;
  /** Importance ratio per `token` (default) or per `sequence` (GSPO). */
  importanceSampling?: "token" | "sequence";
  /** Gradient clipping norm, above 0 (default 1). */
  maxGradNorm?: number;
  /** Sequences per forward/backward pass, 1-4096 (default 16). */
  microBatchSize?: number;
  /**
   * Padded tokens per forward/backward pass (rows x the longest row; default 4096): bounds a pass's
   * activation memory when sequences are long. A longer sequence gets a pass of its own. Memory
   * only: the gradient is the same.
   */
  microBatchTokens?: number;
  /** Optimizer steps the batch is split into, 1-1000 (default 1). */
  gradientSteps?: number;
  /**
   * Overrides the temperature each sampled turn is scored at, above 0 and at most 10. Leave it out:
   * the server records each turn's sampling parameters (temperature, top-p, top-k) and the trainer
   * scores it with them; one given here that differs is used with a warning.
   */
  temperature?: number;
  /** Longer sequences are skipped (default: the model's context length). */
  maxSequenceLength?: number;
  /**
   * How the trainer accounts for the sampler scoring tokens differently from itself (vLLM's kernels,
   * bf16, or an older step): `tis` (default) takes the ratio against the trainer's own logprobs and
   * weights each token by min(trainer / sampler probability, `samplerCorrectionCap`), truncated
   * importance sampling; `none` takes the ratio against the sampler's logprobs as they came.
   */
  samplerCorrection?: "tis" | "none";
  /** The truncation of `tis`'s per-token weight, 1 to 1e6 (default 2). */
  samplerCorrectionCap?: number;
  /**
   * How a gradient step's token losses are summed. `trajectory` (default, GRPO): a mean over the
   * trajectories of the step's groups (zero-advantage ones included, GRPO's 1/G) of each one's token
   * mean, so a long answer's tokens each count less. `token` (DAPO): a mean over all the tokens of
   * the step's groups, every token alike. `constant` (Dr. GRPO as published, advantages unscaled by
   * default): divided by the batch's trajectories per gradient step (flat groups included) x
   * `normalizationTokens`, so neither an answer's length nor the share of flat groups changes a
   * token's weight.
   */
  lengthNormalization?: "trajectory" | "token" | "constant";
  /** The constant of `lengthNormalization: "constant"` (Dr. GRPO's maximum completion length; default 1024). */
  normalizationTokens?: number;
  /**
   * The KL penalty's reference (with `klCoef` above 0): this step's adapter instead of the base model,
   * e.g. the SFT step an RL run started from. A step without a checkpoint is a 400.
   */
  klRefStep?: number;
  /**
   * Skip groups with a turn sampled more than this many steps before the step that trains them
   * (counted as `stale` in `groupsSkippedByReason`). The pipelined `trainLoop` sets it from its own
   * `maxStepsOffPolicy`; every step reports `policyLagMin/Mean/Max` of its trained tokens either way.
   */
  maxStepsOffPolicy?: number;
  /**
   * Train trajectories whose assistant turns are plain messages, with no token ids or logprobs
   * (offline logs, another model's answers; ART's `allow_training_without_logprobs`): the server
   * renders them with the chat template and scores their tokens with the policy at the start of the
   * step, so each token's ratio starts at 1. Default false: such trajectories are context only (the
   * client refuses a group of them, the server warns naming this option). Counted in
   * `unsampledTrajectoriesTrained`.
   */
  allowTrainingWithoutLogprobs?: boolean;
  /**
   * Train turns sampled under `response_format` (a JSON schema enforced token by token; their
   * `sampling.constrained` is true). Their logprobs are of the constrained distribution and the
   * trainer scores the unconstrained model, so by default a step with them is refused (a 400 naming
   * this option); set it to train them anyway, with the sampler correction weighing them down where
   * the constraint acted. Default false.
   */
  allowConstrainedChoices?: boolean;
  /**
   * Start this step with fresh optimizer moments. Default: only when the model's previous step was
   * of the other kind (the first RL step after SFT), since Adam's moments from a warm start point
   * along SFT's gradient and shrink RL's first updates; `true` always, `false` never.
   */
  resetOptimizer?: boolean;
}

/** @deprecated The former name of {@link GrpoConfig}; it will be removed in a later release. */
export type TrainConfig = GrpoConfig;

/** @internal The zod schema that checks a {@link GrpoConfig} (the interface documents each field). */
export const GrpoConfigSchema = z.object({
  learningRate: z.number().gt(0).max(1).optional(),
  loss: z.enum(["ppo", "cispo"]).optional(),
  epsLow: z.number().min(0).max(1).optional(),
  epsHigh: z.number().min(0).max(10).optional(),
  klCoef: z.number().min(0).max(100).optional(),
  scaleRewards: z.boolean().optional(),
  importanceSampling: z.enum(["token", "sequence"]).optional(),
  maxGradNorm: z.number().gt(0).max(1e6).optional(),
  microBatchSize: z.number().int().min(1).max(4096).optional(),
  microBatchTokens: z.number().int().min(1).max(1e8).optional(),
  gradientSteps: z.number().int().min(1).max(1000).optional(),
  temperature: z.number().gt(0).max(10).optional(),
  maxSequenceLength: z.number().int().min(1).max(1_048_576).optional(),
  samplerCorrection: z.enum(["tis", "none"]).optional(),
  samplerCorrectionCap: z.number().min(1).max(1e6).optional(),
  lengthNormalization: z.enum(["trajectory", "token", "constant"]).optional(),
  normalizationTokens: z.number().int().min(1).max(1_048_576).optional(),
  klRefStep: z.number().int().min(0).max(1e9).optional(),
  maxStepsOffPolicy: z.number().int().min(0).max(1e6).optional(),
  allowTrainingWithoutLogprobs: z.boolean().optional(),
  allowConstrainedChoices: z.boolean().optional(),
  resetOptimizer: z.boolean().optional(),
}).strict();

/** SFT settings of one step (the server's defaults apply to what is left out). */
export interface SftConfig {
  /** Adam learning rate, above 0 and at most 1 (default 2e-4). */
  learningRate?: number;
  /** Passes over the data, 1-1000 (default 3). */
  epochs?: number;
  /** Conversations per optimizer step, 1-4096 (default 8). */
  batchSize?: number;
  /** Learning-rate schedule: `cosine` (default) or `constant`. */
  schedule?: "constant" | "cosine";
  /** Share of the steps spent warming up, 0 to below 1 (default 0.1). */
  warmupRatio?: number;
  /** Learn every assistant turn (`allAssistant`, default) or the last one only (`lastAssistant`). */
  trainOn?: "allAssistant" | "lastAssistant";
  /** Gradient clipping norm, above 0 (default 1). */
  maxGradNorm?: number;
  /** Sequences per forward/backward pass, 1-4096 (default 16). */
  microBatchSize?: number;
  /**
   * Padded tokens per forward/backward pass (rows x the longest row; default 4096): bounds a pass's
   * activation memory when sequences are long. A longer sequence gets a pass of its own. Memory
   * only: the gradient is the same.
   */
  microBatchTokens?: number;
  /** Shuffling seed (default 0). */
  seed?: number;
  /**
   * Start this step with fresh optimizer moments. Default: only when the model's previous step was
   * RL (Adam's moments from RL would steer SFT's first updates); `true` always, `false` never.
   */
  resetOptimizer?: boolean;
}

/** @internal The zod schema that checks a {@link SftConfig} (the interface documents each field). */
export const SftConfigSchema = z.object({
  learningRate: z.number().gt(0).max(1).optional(),
  epochs: z.number().int().min(1).max(1000).optional(),
  batchSize: z.number().int().min(1).max(4096).optional(),
  schedule: z.enum(["constant", "cosine"]).optional(),
  warmupRatio: z.number().min(0).lt(1).optional(),
  trainOn: z.enum(["allAssistant", "lastAssistant"]).optional(),
  maxGradNorm: z.number().gt(0).max(1e6).optional(),
  microBatchSize: z.number().int().min(1).max(4096).optional(),
  microBatchTokens: z.number().int().min(1).max(1e8).optional(),
  seed: z.number().int().min(0).max(2 ** 32 - 1).optional(),
  resetOptimizer: z.boolean().optional(),
}).strict();

// The interfaces document each field; these lines keep the schemas and the interfaces in step.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const inStep: [
  Same<z.output<typeof LoraConfigSchema>, LoraConfig>,
  Same<z.output<typeof GrpoConfigSchema>, GrpoConfig>,
  Same<z.output<typeof SftConfigSchema>, SftConfig>,
] = [true, true, true];
void inStep;
