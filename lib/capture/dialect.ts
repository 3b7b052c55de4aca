/**
 * The APIs a recording fetch records: OpenAI's chat completions, OpenAI's Responses API and
 * Anthropic's Messages API. Each is a {@link Dialect}: how to ask its endpoint for token ids, what
 * conversation a request sends (as chat messages and tools), and what chat completion its answer
 * (JSON or streamed) amounts to. Everything after that (trajectories, training, `t.messages()`) sees
 * one conversation form, whichever API the agent spoke.
 * @module
 */
import type OpenAI from "openai";
import { SampleFields } from "../core/wire";
import type { RecordedRequest } from "./rollout-context";
import { SseAccumulator } from "./sse-accumulator";
import type { StreamRecorder } from "./stream-recorder";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

/** One API's requests and answers, as the recording fetch needs them. */
export interface Dialect {
  /** The API's name, for debug lines. */
  readonly name: string;
  /** The request body to send (for our server: asking for token ids where the API needs asking). */
  prepare(body: Record<string, unknown>, askForTokens: boolean): Record<string, unknown>;
  /** The conversation the request sends, as chat messages and tools. */
  request(body: Record<string, unknown>): RecordedRequest;
  /** The chat completion a JSON answer amounts to; undefined when it is not one of this API's answers. */
  completion(answer: unknown): ChatCompletion | undefined;
  /** A reader for a streamed answer. */
  stream(): StreamRecorder;
}

/** OpenAI's chat completions: the conversation form itself. */
export const chatDialect: Dialect = {
  name: "chat completion",
  prepare: (body, askForTokens) => (askForTokens ? { ...body, logprobs: true, return_token_ids: true } : body),
  request: (body) => ({
    messages: Array.isArray(body.messages) ? body.messages : [],
    ...(Array.isArray(body.tools) ? { tools: body.tools } : {}),
  }),
  completion: (answer) => ((answer as ChatCompletion | undefined)?.choices ? (answer as ChatCompletion) : undefined),
  stream: () => new SseAccumulator(),
};

/** A tool call of an answer. */
export interface AnswerToolCall {
  /** The call's id (what a tool result answers). */
  id: string;
  /** The tool's name. */
  name: string;
  /** The arguments, as JSON text. */
  arguments: string;
}

/** What one sampled answer said, in chat's terms: the message, why it ended, and what training needs. */
export interface SampledAnswer {
  /** The answer's id. */
  id: string;
  /** The model name it answered as. */
  model: string;
  /** Unix seconds. */
  created: number;
  /** Its text; null when it only called tools. */
  content: string | null;
  /** Its tool calls. */
  toolCalls: AnswerToolCall[];
  /** Why it ended, in chat's words. */
  finishReason: "stop" | "length" | "tool_calls";
  /** The answer's top-level fields (our server's `prompt_token_ids`, `token_ids`, ...). */
  fields: Record<string, unknown>;
}

/**
 * The chat completion of an answer of another API: one choice, with the token ids, logprobs and
 * provenance of the answer when it carries them (our server's answers do; another endpoint's are
 * recorded as plain messages).
 */
export function completionOf(answer: SampledAnswer): ChatCompletion {
  const sample = SampleFields.safeParse(answer.fields);
  const tokens = sample.success
    ? {
      token_ids: sample.data.token_ids,
      ...(sample.data.art_provenance ? { art_provenance: sample.data.art_provenance } : {}),
      ...(sample.data.art_policy_step !== undefined ? { art_policy_step: sample.data.art_policy_step } : {}),
      ...(sample.data.art_sampling ? { art_sampling: sample.data.art_sampling } : {}),
    }
    : {};
  const toolCalls = answer.toolCalls.map((call) => ({ id: call.id, type: "function" as const, function: { name: call.name, arguments: call.arguments } }));
  return {
    id: answer.id, object: "chat.completion", created: answer.created, model: answer.model,
    choices: [{
      index: 0,
      message: { role: "assistant", content: answer.content, refusal: null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
      finish_reason: answer.finishReason,
      logprobs: sample.success ? { content: sample.data.logprobs.content, refusal: null } : null,
      ...tokens,
    }],
    ...(sample.success ? { prompt_token_ids: sample.data.prompt_token_ids } : {}),
  } as unknown as ChatCompletion;
}

/** The text of content given as a string or as a list of text parts (the parts' `text` joined). */
export function partsText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part: { text?: unknown }) => (typeof part?.text === "string" ? part.text : "")).join("");
}
