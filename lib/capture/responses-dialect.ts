/**
 * OpenAI's Responses API (`POST .../responses`) as a recording fetch records it: `instructions` and
 * `input` items become chat messages (an assistant message and the `function_call` items after it
 * are one assistant turn, a `function_call_output` a tool message), and an answer, JSON or the
 * `response.completed` event of a stream, one chat completion. The server answers the same request
 * by the same rewriting, so the conversation recorded is the one the model was prompted with.
 *
 * The AI SDK refers to the items of earlier answers by id (`item_reference`, when it assumes OpenAI
 * stores responses): the dialect keeps the items of the answers it saw, and puts each referenced
 * item back in place, in what it records and (for our server, which stores nothing) in what it sends.
 * @module
 */
import type OpenAI from "openai";
import { ResponseObject, ResponseOutputItem } from "../core/wire";
import { completionOf, partsText, type AnswerToolCall, type Dialect } from "./dialect";
import type { StreamRecorder } from "./stream-recorder";
import type { RecordedRequest } from "./rollout-context";
import { eventJson, SseEvents } from "./sse-events";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;
type Item = Record<string, unknown>;
type Message = Record<string, unknown> & { role: string };

/** How many output items a dialect remembers for `item_reference`s (the oldest go first). */
const REMEMBERED_ITEMS = 4096;

/** OpenAI's Responses API, as the recording fetch reads it; one per fetch (it remembers answers' items). */
export class ResponsesDialect implements Dialect {
  readonly name = "Responses API call";
  private readonly items = new Map<string, Item>();

  prepare(body: Record<string, unknown>, askForTokens: boolean): Record<string, unknown> {
    return askForTokens ? this.expanded(body) : body;
  }

  request(body: Record<string, unknown>): RecordedRequest {
    const { input, instructions, tools } = this.expanded(body);
    const messages: Message[] = typeof instructions === "string" && instructions ? [{ role: "system", content: instructions }] : [];
    if (typeof input === "string") messages.push({ role: "user", content: input });
    for (const item of Array.isArray(input) ? (input as Item[]) : []) addItem(messages, item);
    const functionTools = (Array.isArray(tools) ? (tools as Item[]) : []).filter((tool) => tool?.type === "function").map((tool) => ({
      type: "function",
      function: Object.fromEntries(["name", "description", "parameters"].filter((key) => tool[key] != null).map((key) => [key, tool[key]])),
    }));
    return { messages, ...(functionTools.length ? { tools: functionTools } : {}) } as unknown as RecordedRequest;
  }

  completion(answer: unknown): ChatCompletion | undefined {
    const parsed = ResponseObject.safeParse(answer);
    if (!parsed.success) return undefined;
    const response = parsed.data;
    const texts: string[] = [];
    const toolCalls: AnswerToolCall[] = [];
    for (const raw of response.output) {
      const item = ResponseOutputItem.safeParse(raw);
      if (!item.success) continue; // reasoning and other items say nothing the conversation keeps
      if (item.data.id) this.remember(item.data.id, raw);
      if (item.data.type === "message") texts.push(partsText(item.data.content));
      else toolCalls.push({ id: item.data.call_id, name: item.data.name, arguments: item.data.arguments });
    }
    const text = texts.join("");
    return completionOf({
      id: response.id, model: response.model, created: response.created_at,
      content: toolCalls.length && !text ? null : text, toolCalls,
      finishReason: toolCalls.length ? "tool_calls" : response.status === "incomplete" ? "length" : "stop",
      fields: response,
    });
  }

  stream(): StreamRecorder {
    return new ResponsesStream(this);
  }

  private remember(id: string, item: Item): void {
    this.items.delete(id);
    this.items.set(id, item);
    if (this.items.size > REMEMBERED_ITEMS) this.items.delete(this.items.keys().next().value as string);
  }

  /** The body with every `item_reference` this dialect can resolve replaced by the item itself. */
  private expanded(body: Record<string, unknown>): Record<string, unknown> {
    if (!Array.isArray(body.input) || !body.input.some((item: Item) => item?.type === "item_reference")) return body;
    const input = (body.input as Item[]).map((item) => {
      if (item?.type !== "item_reference" || typeof item.id !== "string") return item;
      const found = this.items.get(item.id);
      if (!found) return item;
      // As an input item: what the API sends back of an output item.
      const { status: _status, ...rest } = found;
      return rest;
    });
    return { ...body, input };
  }
}

/** One input item onto the chat messages so far (the server's rewriting, api/dialects/responses_api.py). */
function addItem(messages: Message[], item: Item): void {
  const type = item?.type ?? (item && "role" in item ? "message" : undefined);
  if (type === "message" && typeof item.role === "string") {
    messages.push({ role: item.role, content: partsText(item.content) });
  } else if (type === "function_call") {
    const call = { id: String(item.call_id ?? ""), type: "function", function: { name: String(item.name ?? ""), arguments: String(item.arguments ?? "{}") } };
    const last = messages[messages.length - 1];
    if (last?.role === "assistant") {
      last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call];
      if (last.content === "") last.content = null;
    } else {
      messages.push({ role: "assistant", content: null, tool_calls: [call] });
    }
  } else if (type === "function_call_output") {
    messages.push({ role: "tool", tool_call_id: String(item.call_id ?? ""), content: partsText(item.output) });
  }
}

/** A streamed answer: its `response.completed` (or `.incomplete`) event holds the whole response. */
class ResponsesStream implements StreamRecorder {
  private readonly events = new SseEvents((data) => this.onData(data));
  private answer: ChatCompletion | undefined;
  private failure: string | undefined;

  constructor(private readonly dialect: ResponsesDialect) {}

  get error(): string | undefined {
    return this.failure;
  }

  get complete(): boolean {
    return this.answer !== undefined || this.failure !== undefined;
  }

  push(text: string): void {
    this.events.push(text);
  }

  finish(): ChatCompletion | undefined {
    this.events.end();
    return this.failure ? undefined : this.answer;
  }

  private onData(data: string): void {
    const event = eventJson(data);
    if (typeof event === "string") {
      this.failure = event;
    } else if (event.type === "error" || event.type === "response.failed") {
      const error = (event.error ?? (event.response as Item | undefined)?.error ?? event) as { message?: unknown };
      this.failure = typeof error.message === "string" ? error.message : JSON.stringify(error);
    } else if (event.type === "response.completed" || event.type === "response.incomplete") {
      this.answer = this.dialect.completion(event.response);
    }
  }
}
