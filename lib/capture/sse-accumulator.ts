/**
 * Streamed chat completions, put back together: the `chat.completion.chunk` events of an SSE
 * stream become one `chat.completion`, keeping what training needs and OpenAI's stream drops
 * (the prompt ids on the first chunk, each chunk's token ids, every logprob, the provenance tag on
 * the finishing chunk), so a streamed turn trains exactly like a non-streamed one.
 * @module
 */
import type OpenAI from "openai";
import type { StreamRecorder } from "./stream-recorder";
import { eventJson, SseEvents } from "./sse-events";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

interface ChoiceSoFar {
  content: string;
  toolCalls: Map<number, { id: string; name: string; arguments: string }>;
  tokenIds: number[];
  logprobs: unknown[];
  finishReason: string | null;
  provenance?: string;
  policyStep?: number;
  sampling?: unknown; // art_sampling as the server sent it (sampledChoice checks it)
}

/** Reads SSE text as it arrives (in any pieces) and builds the completion it describes. */
export class SseAccumulator implements StreamRecorder {
  private readonly events = new SseEvents((data) => this.onData(data));
  private readonly choices = new Map<number, ChoiceSoFar>();
  private promptTokenIds: number[] | undefined;
  private header: { id: string; model: string; created: number } | undefined;
  private usage: unknown;
  private errorMessage: string | undefined;
  private sawDone = false;

  /** Feeds the next piece of the stream's text. */
  push(text: string): void {
    this.events.push(text);
  }

  /** An error the stream carried (an `{"error": ...}` event), if any. */
  get error(): string | undefined {
    return this.errorMessage;
  }

  /**
   * The completion, once the stream has ended: undefined when it carried an error, no chunk, or
   * ended before every choice finished (a cut connection, a cancelled request).
   */
  finish(): ChatCompletion | undefined {
    this.events.end();
    if (this.errorMessage || !this.header || !this.choices.size) return undefined;
    if ([...this.choices.values()].some((c) => c.finishReason === null)) return undefined;
    const choices = [...this.choices.entries()].sort(([a], [b]) => a - b).map(([index, c]) => {
      const toolCalls = [...c.toolCalls.entries()].sort(([a], [b]) => a - b)
        .map(([, call]) => ({ id: call.id, type: "function" as const, function: { name: call.name, arguments: call.arguments } }));
      return {
        index,
        message: {
          role: "assistant" as const,
          content: toolCalls.length && !c.content ? null : c.content,
          refusal: null,
          ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: c.finishReason as ChatCompletion["choices"][number]["finish_reason"],
        logprobs: { content: c.logprobs, refusal: null },
        token_ids: c.tokenIds,
        ...(c.provenance ? { art_provenance: c.provenance } : {}),
        ...(c.policyStep !== undefined ? { art_policy_step: c.policyStep } : {}),
        ...(c.sampling !== undefined ? { art_sampling: c.sampling } : {}),
      };
    });
    return {
      id: this.header.id, object: "chat.completion", created: this.header.created, model: this.header.model,
      choices, ...(this.usage ? { usage: this.usage } : {}),
      ...(this.promptTokenIds ? { prompt_token_ids: this.promptTokenIds } : {}),
    } as unknown as ChatCompletion;
  }

  /** True once `data: [DONE]` was read. */
  get done(): boolean {
    return this.sawDone;
  }

  /** The stream's end (`[DONE]`) or an error was read. */
  get complete(): boolean {
    return this.sawDone || this.errorMessage !== undefined;
  }

  private onData(data: string): void {
    if (data === "[DONE]") {
      this.sawDone = true;
      return;
    }
    const chunk = eventJson(data);
    if (typeof chunk === "string") {
      this.errorMessage = chunk;
      return;
    }
    if (chunk.error) {
      const error = chunk.error as { message?: unknown };
      this.errorMessage = typeof error.message === "string" ? error.message : JSON.stringify(chunk.error);
      return;
    }
    this.header ??= { id: String(chunk.id ?? ""), model: String(chunk.model ?? ""), created: Number(chunk.created ?? 0) };
    if (Array.isArray(chunk.prompt_token_ids)) this.promptTokenIds = chunk.prompt_token_ids as number[];
    if (chunk.usage) this.usage = chunk.usage;
    for (const raw of (chunk.choices as Record<string, unknown>[] | undefined) ?? []) this.onChoice(raw);
  }

  private onChoice(raw: Record<string, unknown>): void {
    const index = typeof raw.index === "number" ? raw.index : 0;
    let c = this.choices.get(index);
    if (!c) {
      c = { content: "", toolCalls: new Map(), tokenIds: [], logprobs: [], finishReason: null };
      this.choices.set(index, c);
    }
    const delta = (raw.delta ?? {}) as { content?: unknown; tool_calls?: unknown };
    if (typeof delta.content === "string") c.content += delta.content;
    for (const call of (Array.isArray(delta.tool_calls) ? delta.tool_calls : []) as Record<string, unknown>[]) {
      // OpenAI streams a call in pieces by index: the id and name first, then argument fragments.
      const k = typeof call.index === "number" ? call.index : c.toolCalls.size;
      const fn = (call.function ?? {}) as { name?: unknown; arguments?: unknown };
      const so = c.toolCalls.get(k) ?? { id: "", name: "", arguments: "" };
      if (typeof call.id === "string") so.id = call.id;
      if (typeof fn.name === "string") so.name += fn.name;
      if (typeof fn.arguments === "string") so.arguments += fn.arguments;
      c.toolCalls.set(k, so);
    }
    if (Array.isArray(raw.token_ids)) c.tokenIds.push(...(raw.token_ids as number[]));
    const logprobs = (raw.logprobs as { content?: unknown } | null | undefined)?.content;
    if (Array.isArray(logprobs)) c.logprobs.push(...logprobs);
    if (typeof raw.finish_reason === "string") c.finishReason = raw.finish_reason;
    if (typeof raw.art_provenance === "string") c.provenance = raw.art_provenance;
    if (typeof raw.art_policy_step === "number") c.policyStep = raw.art_policy_step;
    if (raw.art_sampling && typeof raw.art_sampling === "object") c.sampling = raw.art_sampling;
  }
}
