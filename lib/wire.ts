/**
 * The wire: zod schemas for everything that crosses HTTP between this client and the gpu-server
 * (mirroring gpu-server/art_server/api/schemas.py). Types come from the schemas.
 * @module
 */
import { z } from "zod";

/** The line the server prints on stdout once it serves. */
export const ReadyLine = z.object({
  event: z.literal("ready"),
  url: z.string().url(),
  token: z.string().min(1),
  pid: z.number().int(),
  version: z.string(),
  data_dir: z.string(),
  base_model: z.string().nullable(),
});
export type ReadyLine = z.infer<typeof ReadyLine>;

/** OpenAI-style error body. */
export const ErrorBody = z.object({
  error: z.object({
    message: z.string(),
    type: z.string().nullable().optional(),
    code: z.string().nullable().optional(),
    param: z.string().nullable().optional(),
  }),
});

/** LoRA configuration of a trainable model. */
export const LoraConfig = z.object({
  r: z.number().int().min(1).max(512).default(8),
  alpha: z.number().int().min(1).default(16),
  dropout: z.number().min(0).lt(1).default(0),
  target_modules: z.array(z.string()).min(1).default(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
});
export type LoraConfig = z.input<typeof LoraConfig>;

/** A registered model as the server describes it. */
export const ModelInfo = z.object({
  name: z.string(),
  project: z.string(),
  base_model: z.string(),
  step: z.number().int().min(0),
  inference_name: z.string(),
  lora: z.object({ r: z.number(), alpha: z.number(), dropout: z.number(), target_modules: z.array(z.string()) }),
  path: z.string(),
  training: z.boolean(),
  resumed: z.boolean().optional(),
});
export type ModelInfo = z.infer<typeof ModelInfo>;

/** A chat message as the server takes it (OpenAI shape). */
export const ChatMessage = z.object({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: z.union([z.string(), z.array(z.object({ type: z.string(), text: z.string().optional() }).passthrough())]).nullable().optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.object({
    id: z.string().optional(),
    type: z.literal("function"),
    function: z.object({ name: z.string(), arguments: z.string() }),
  })).optional(),
  tool_call_id: z.string().optional(),
}).passthrough();
export type ChatMessage = z.infer<typeof ChatMessage>;

/** A sampled assistant turn, as training takes it: the exact prompt and sampled ids with logprobs. */
export const SampledChoiceWire = z.object({
  kind: z.literal("choice"),
  message: z.record(z.string(), z.unknown()),
  prompt_token_ids: z.array(z.number().int()),
  token_ids: z.array(z.number().int()),
  logprobs: z.array(z.number()),
  finish_reason: z.string().nullable(),
});
export type SampledChoiceWire = z.infer<typeof SampledChoiceWire>;

/** A trajectory as the server takes it (see Trajectory.toWire). */
export const TrajectoryWire = z.object({
  messages_and_choices: z.array(z.union([SampledChoiceWire, ChatMessage])).min(1),
  tools: z.array(z.unknown()).optional(),
  reward: z.number().finite(),
  metrics: z.record(z.string(), z.union([z.number(), z.boolean()])),
  metadata: z.record(z.string(), z.unknown()),
  logs: z.array(z.string()),
});
export type TrajectoryWire = z.infer<typeof TrajectoryWire>;

/** What the OpenAI endpoint returns beyond OpenAI's fields (vLLM's names). */
export const TokenFields = z.object({
  prompt_token_ids: z.array(z.number().int()),
  choices: z.array(z.object({
    index: z.number().int(),
    token_ids: z.array(z.number().int()),
    logprobs: z.object({ content: z.array(z.object({ logprob: z.number() }).passthrough()).nullable() }).nullable(),
  }).passthrough()),
}).passthrough();

/** GRPO step configuration (server defaults apply to what is left out). */
export const TrainConfig = z.object({
  learning_rate: z.number().positive().optional(),
  loss: z.enum(["ppo", "cispo"]).optional(),
  eps_low: z.number().min(0).optional(),
  eps_high: z.number().min(0).optional(),
  kl_coef: z.number().min(0).optional(),
  scale_rewards: z.boolean().optional(),
  importance_sampling: z.enum(["token", "sequence"]).optional(),
  max_grad_norm: z.number().positive().optional(),
  micro_batch_size: z.number().int().min(1).optional(),
  gradient_steps: z.number().int().min(1).optional(),
  temperature: z.number().positive().optional(),
  max_sequence_length: z.number().int().min(1).optional(),
}).strict();
export type TrainConfig = z.infer<typeof TrainConfig>;

/** SFT configuration. */
export const SftConfig = z.object({
  learning_rate: z.number().positive().optional(),
  epochs: z.number().int().min(1).optional(),
  batch_size: z.number().int().min(1).optional(),
  schedule: z.enum(["constant", "cosine"]).optional(),
  warmup_ratio: z.number().min(0).lt(1).optional(),
  train_on: z.enum(["all_assistant", "last_assistant"]).optional(),
  max_grad_norm: z.number().positive().optional(),
  micro_batch_size: z.number().int().min(1).optional(),
  seed: z.number().int().optional(),
}).strict();
export type SftConfig = z.infer<typeof SftConfig>;

/** One NDJSON line of a training step. */
export const TrainLine = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), from_step: z.number().int(), step: z.number().int() }).passthrough(),
  z.object({
    type: z.literal("progress"),
    gradient_step: z.number().int(),
    gradient_steps: z.number().int(),
    loss: z.number(),
    grad_norm: z.number(),
    lr: z.number(),
  }).passthrough(),
  z.object({ type: z.literal("warning"), message: z.string() }).passthrough(),
  z.object({ type: z.literal("result"), step: z.number().int(), metrics: z.record(z.string(), z.unknown()) }),
  z.object({ type: z.literal("error"), error: ErrorBody.shape.error }),
]);
export type TrainLine = z.infer<typeof TrainLine>;

/** The metrics row a step or a log call appends to the history. */
export const HistoryRow = z.object({ step: z.number().int(), split: z.string() }).catchall(z.unknown());
export type HistoryRow = z.infer<typeof HistoryRow>;

/** What deleting checkpoints did. */
export const DeleteCheckpointsResult = z.object({
  deleted: z.array(z.number().int()),
  kept: z.array(z.number().int()),
  best_step: z.number().int().nullable(),
}).passthrough();
export type DeleteCheckpointsResult = z.infer<typeof DeleteCheckpointsResult>;
