/**
 * Anthropic's Messages API (`POST .../messages`) as a recording fetch records it: `system` and the
 * messages' blocks become chat messages (`tool_use` blocks an assistant turn's tool calls,
 * `tool_result` blocks tool messages ahead of the user's text), and an answer, JSON or a stream's
 * events put back together, one chat completion. The server answers the same request by the same
 * rewriting (api/dialects/messages_api.py).
 * @module
 */
import type OpenAI from "openai";
import { MessageBlock, MessageObject } from "../core/wire";
import { completionOf, partsText, type Dialect } from "./dialect";
import type { StreamRecorder } from "./stream-recorder";
import type { RecordedRequest } from "./rollout-context";
import { eventJson, SseEvents } from "./sse-events";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;
type Block = Record<string, unknown>;
type Message = Record<string, unknown> & { role: string };

/** Anthropic's Messages API, as the recording fetch reads it (see the module comment). */
export const messagesDialect: Dialect = {
  name: "Messages API call",
  prepare: (body) => body, // our server always answers with token ids here
  request(body): RecordedRequest {
    const messages: Message[] = [];
    const system = partsText(body.system);
    if (system) messages.push({ role: "system", content: system });
    for (const message of Array.isArray(body.messages) ? (body.messages as Block[]) : []) {
      const role = String(message?.role ?? "user");
      const blocks: Block[] = typeof message?.content === "string" ? [{ type: "text", text: message.content }] : Array.isArray(message?.content) ? message.content : [];
      const text = partsText(blocks.filter((block) => block?.type === "text"));
      if (role === "assistant") {
        const calls = blocks.filter((block) => block?.type === "tool_use").map((block) => ({
          id: String(block.id ?? ""), type: "function", function: { name: String(block.name ?? ""), arguments: JSON.stringify(block.input ?? {}) },
        }));
        messages.push({ role, content: text || !calls.length ? text : null, ...(calls.length ? { tool_calls: calls } : {}) });
        continue;
      }
      const results = blocks.filter((block) => block?.type === "tool_result");
      for (const result of results) messages.push({ role: "tool", tool_call_id: String(result.tool_use_id ?? ""), content: partsText(result.content) });
      if (text || !results.length) messages.push({ role, content: text });
    }
    const tools = (Array.isArray(body.tools) ? (body.tools as Block[]) : []).filter((tool) => (tool?.type ?? "custom") === "custom").map((tool) => ({
      type: "function",
      function: { name: tool.name, ...(tool.description != null ? { description: tool.description } : {}), parameters: tool.input_schema },
    }));
    return { messages, ...(tools.length ? { tools } : {}) } as unknown as RecordedRequest;
  },
  completion(answer) {
    const parsed = MessageObject.safeParse(answer);
    if (!parsed.success) return undefined;
    const message = parsed.data;
    const blocks = message.content.map((raw) => MessageBlock.safeParse(raw)).flatMap((block) => (block.success ? [block.data] : []));
    const toolCalls = blocks.flatMap((block) => (block.type === "tool_use" ? [{ id: block.id, name: block.name, arguments: JSON.stringify(block.input ?? {}) }] : []));
    const text = blocks.map((block) => (block.type === "text" ? block.text : "")).join("");
    return completionOf({
      id: message.id, model: message.model, created: Math.floor(Date.now() / 1000),
      content: toolCalls.length && !text ? null : text, toolCalls,
      finishReason: message.stop_reason === "tool_use" ? "tool_calls" : message.stop_reason === "max_tokens" ? "length" : "stop",
      fields: message,
    });
  },
  stream: () => new MessagesStream(),
};

/** A streamed answer put back together: `message_start`, the content blocks' deltas, `message_delta`. */
class MessagesStream implements StreamRecorder {
  private readonly events = new SseEvents((data) => this.onData(data));
  private message: Record<string, unknown> | undefined;
  private readonly blocks: Block[] = [];
  private readonly partialJson = new Map<number, string>();
  private stopped = false;
  private failure: string | undefined;

  get error(): string | undefined {
    return this.failure;
  }

  get complete(): boolean {
    return this.stopped || this.failure !== undefined;
  }

  push(text: string): void {
    this.events.push(text);
  }

  finish(): ChatCompletion | undefined {
    this.events.end();
    if (this.failure || !this.message || !this.stopped) return undefined;
    const content = this.blocks.map((block, index) => {
      if (block.type !== "tool_use" || !this.partialJson.has(index)) return block;
      try {
        return { ...block, input: JSON.parse(this.partialJson.get(index) || "{}") as unknown };
      } catch {
        return block;
      }
    });
    return messagesDialect.completion({ ...this.message, content });
  }

  private onData(data: string): void {
    const event = eventJson(data);
    if (typeof event === "string") {
      this.failure = event;
      return;
    }
    const index = typeof event.index === "number" ? event.index : -1;
    const delta = (event.delta ?? {}) as Block;
    switch (event.type) {
      case "message_start":
        this.message = { ...(event.message as Block) };
        break;
      case "content_block_start":
        this.blocks[index] = { ...(event.content_block as Block) };
        break;
      case "content_block_delta": {
        const block = this.blocks[index];
        if (!block) break;
        if (delta.type === "text_delta") block.text = String(block.text ?? "") + String(delta.text ?? "");
        if (delta.type === "input_json_delta") this.partialJson.set(index, (this.partialJson.get(index) ?? "") + String(delta.partial_json ?? ""));
        break;
      }
      case "message_delta": {
        // Our server's token fields ride on this event, beside the stop reason.
        const { type: _type, delta: _delta, usage: _usage, ...fields } = event;
        this.message = { ...this.message, ...fields, stop_reason: delta.stop_reason ?? null, stop_sequence: delta.stop_sequence ?? null };
        break;
      }
      case "message_stop":
        this.stopped = true;
        break;
      case "error": {
        const error = (event.error ?? event) as { message?: unknown };
        this.failure = typeof error.message === "string" ? error.message : JSON.stringify(error);
        break;
      }
    }
  }
}
