/**
 * The wire: zod schemas for everything that crosses HTTP between this client and the gpu-server
 * (mirroring gpu-server/art_server/api/schemas.py), in the wire's snake_case. Types come from the
 * schemas; convert.ts turns them into the camelCase API.
 * @module
 */
import { z } from "zod";
import type { paths } from "./openapi.gen";

/**
 * The JSON body a POST route takes, as the server's schema declares it (docs/openapi.json, through
 * the types openapi-typescript generates from it): the client builds each request body as one of
 * these, so a body the server would not take fails `tsc`.
 * @internal
 */
export type RouteBody<P extends keyof paths> =
  paths[P] extends { post: { requestBody: { content: { "application/json": infer B } } } } ? B : never;
export type RegisterBody = RouteBody<"/v1/art/models/register">;
export type TrainBody = RouteBody<"/v1/art/models/{name}/train">;
export type SftBody = RouteBody<"/v1/art/models/{name}/train_sft">;
export type LogBody = RouteBody<"/v1/art/models/{name}/log">;
export type DeleteCheckpointsBody = RouteBody<"/v1/art/models/{name}/delete_checkpoints">;
export type ForkBody = RouteBody<"/v1/art/models/{name}/fork">;

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
  forked_from: z.object({ project: z.string(), name: z.string(), step: z.number().int().min(0) }).optional(),
  reporters: z.array(z.object({
    tracker: z.enum(["wandb", "trackio"]), state: z.enum(["starting", "running", "failed", "closed"]),
    rows_sent: z.number().int().min(0), location: z.string().optional(), error: z.string().optional(),
  })).optional(),
});
export type ModelInfo = z.infer<typeof ModelInfo>;

/** A chat message as the server takes it (OpenAI shape). */
export const ChatMessage = z.object({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: z.union([z.string(), z.array(z.object({ type: z.literal("text"), text: z.string().optional() }).passthrough())]).nullable().optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.object({
    id: z.string().optional(),
    type: z.literal("function"),
    function: z.object({ name: z.string(), arguments: z.string() }),
  })).optional(),
  tool_call_id: z.string().optional(),
}).passthrough();
export type ChatMessage = z.infer<typeof ChatMessage>;

/** The sampling parameters a choice was drawn with, as the server records them on it. */
export const SamplingWire = z.object({
  temperature: z.number().min(0),
  top_p: z.number().gt(0).max(1),
  top_k: z.number().int().min(0),
  /** Absent from servers before min-p was recorded (0: off). */
  min_p: z.number().min(0).max(1).optional(),
  /** response_format constrained the choice (absent: it did not). */
  constrained: z.boolean().optional(),
  engine: z.string(),
});
export type SamplingWire = z.infer<typeof SamplingWire>;

/** A sampled assistant turn, as training takes it: the exact prompt and sampled ids with logprobs. */
export const SampledChoiceWire = z.object({
  kind: z.literal("choice"),
  message: z.record(z.string(), z.unknown()),
  prompt_token_ids: z.array(z.number().int()),
  token_ids: z.array(z.number().int()),
  logprobs: z.array(z.number()),
  finish_reason: z.string().nullable(),
  /** Which server and base model sampled it (the server checks it when training). */
  art_provenance: z.string().optional(),
  /** The trained model's step that sampled it. */
  art_policy_step: z.number().int().min(0).optional(),
  /** The sampling parameters it was drawn with: the trainer scores it with them. */
  art_sampling: SamplingWire.optional(),
});
export type SampledChoiceWire = z.infer<typeof SampledChoiceWire>;

/** A tool the model is offered: a function (OpenAI's shape; the server takes no other kind). */
export const ToolWire = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullable().optional(),
  }),
});

/** A trajectory as the server takes it (see Trajectory.toWire). */
export const TrajectoryWire = z.object({
  messages_and_choices: z.array(z.union([SampledChoiceWire, ChatMessage])).min(1),
  tools: z.array(ToolWire).optional(),
  reward: z.number().finite(),
  metrics: z.record(z.string(), z.union([z.number(), z.boolean()])),
  metadata: z.record(z.string(), z.unknown()),
  logs: z.array(z.string()),
});
export type TrajectoryWire = z.infer<typeof TrajectoryWire>;

/** A conversation SFT learns from, as the server takes it. */
export const ConversationWire = z.object({
  messages: z.array(ChatMessage).min(1),
  tools: z.array(ToolWire).optional(),
});

/** What the OpenAI endpoint returns beyond OpenAI's fields (vLLM's names). */
export const TokenFields = z.object({
  prompt_token_ids: z.array(z.number().int()),
  choices: z.array(z.object({
    index: z.number().int(),
    token_ids: z.array(z.number().int()),
    logprobs: z.object({ content: z.array(z.object({ logprob: z.number().nullable() }).passthrough()).nullable() }).nullable(),
    art_provenance: z.string().optional(),
    art_policy_step: z.number().int().min(0).optional(),
    art_sampling: SamplingWire.optional(),
  }).passthrough()),
}).passthrough();

/** What training needs of one sample, at the top of a Responses API or Messages API answer (chat's names). */
export const SampleFields = z.object({
  prompt_token_ids: z.array(z.number().int()),
  token_ids: z.array(z.number().int()),
  logprobs: z.object({ content: z.array(z.object({ logprob: z.number().nullable() }).passthrough()) }),
  art_provenance: z.string().optional(),
  art_policy_step: z.number().int().min(0).optional(),
  art_sampling: SamplingWire.optional(),
});
export type SampleFields = z.infer<typeof SampleFields>;

/** The output items of a Responses API answer that become a chat message (others are skipped). */
export const ResponseOutputItem = z.discriminatedUnion("type", [
  z.object({ type: z.literal("message"), id: z.string().optional(), content: z.array(z.object({ type: z.string(), text: z.string().optional() }).passthrough()) }).passthrough(),
  z.object({ type: z.literal("function_call"), id: z.string().optional(), call_id: z.string(), name: z.string(), arguments: z.string() }).passthrough(),
]);
export type ResponseOutputItem = z.infer<typeof ResponseOutputItem>;

/** A Responses API answer, as far as capture reads it. */
export const ResponseObject = z.object({
  id: z.string(),
  created_at: z.number(),
  model: z.string(),
  status: z.string(),
  output: z.array(z.object({ type: z.string() }).passthrough()),
}).passthrough();

/** A content block of a Messages API answer. */
export const MessageBlock = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text"), text: z.string() }).passthrough(),
  z.object({ type: z.literal("tool_use"), id: z.string(), name: z.string(), input: z.unknown() }).passthrough(),
]);

/** A Messages API answer, as far as capture reads it. */
export const MessageObject = z.object({
  id: z.string(),
  model: z.string(),
  content: z.array(z.object({ type: z.string() }).passthrough()),
  stop_reason: z.string().nullable(),
}).passthrough();

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
  z.object({ type: z.literal("error"), status: z.number().int().optional(), error: ErrorBody.shape.error }),
]);
export type TrainLine = z.infer<typeof TrainLine>;
/** A line of a training stream other than an error (the backend throws those). */
export type StreamLine = Exclude<TrainLine, { type: "error" }>;

/** The metrics row a step or a log call appends to the history (snake_case; see convert.ts). */
export const HistoryRowWire = z.object({ step: z.number().int(), split: z.string() }).catchall(z.unknown());

/** What deleting checkpoints did. */
export const DeleteCheckpointsWire = z.object({
  deleted: z.array(z.number().int()),
  kept: z.array(z.number().int()),
  best_step: z.number().int().nullable(),
  metric: z.string().optional(),
  note: z.string().nullable().optional(),
});
export type DeleteCheckpointsWire = z.infer<typeof DeleteCheckpointsWire>;
