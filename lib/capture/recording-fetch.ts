/**
 * The recording fetch: what a model hands to any framework or SDK that takes an endpoint and a
 * custom `fetch`. It knows three APIs (dialect.ts): chat completions, OpenAI's Responses API and
 * Anthropic's Messages API. On a trained model's endpoint it asks for token ids and logprobs where
 * needed; inside the model's rollout (rollout-context.ts) it records each completed call, JSON or
 * streamed, into the rollout's trajectory before the caller sees the end of the answer.
 * @module
 */
import type OpenAI from "openai";
import { chatDialect, type Dialect } from "./dialect";
import type { StreamRecorder } from "./stream-recorder";
import { messagesDialect } from "./messages-dialect";
import { ResponsesDialect } from "./responses-dialect";
import { debugLog, startCall } from "./rollout-context";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

/** What a {@link recordingFetch} records for, and how it talks to its endpoint. */
export interface RecordingFetchOptions {
  /** The model whose rollouts the calls are recorded into. */
  owner: object;
  /** The model's name, for debug lines. */
  label: string;
  /** Asks for token ids where the API needs asking (our server); false for other endpoints. */
  askForTokens: boolean;
  /** The fetch underneath (default: the global fetch). */
  base?: typeof fetch;
}

/** A fetch that records model calls into the owner's current rollout (see the module comment). */
export function recordingFetch(options: RecordingFetchOptions): typeof fetch {
  const base = options.base ?? ((input, init) => fetch(input, init));
  // Per fetch: the Responses dialect remembers the items of the answers it saw (item_reference).
  const dialects = { responses: new ResponsesDialect() };
  return async (input, init) => {
    const target = modelCall(input, init, dialects);
    if (target === null) return base(input, init);
    const { url, dialect } = target;
    const pending = startCall(options.owner);
    if (!pending) debugLog("%s: a %s outside any rollout of this model: not recorded", options.label, dialect.name);
    const watches = pending !== undefined || dialect === dialects.responses; // its answers' items, for later references
    // Nothing to add to the request and nothing to record: its body is left unread.
    if (!watches && !options.askForTokens) return base(input, init);
    try {
      const call = await readCall(url, input, init);
      if (!call) {
        pending?.abandon();
        return base(input, init);
      }
      call.body = dialect.prepare(call.body, options.askForTokens);
      const response = await base(call.url, { ...call.init, body: JSON.stringify(call.body) });
      if (!watches) return response;
      if (!response.ok || !response.body) {
        debugLog("%s: a %s answered %d: not recorded", options.label, dialect.name, response.status);
        pending?.abandon();
        return response;
      }
      const request = dialect.request(call.body);
      const record = (completion: ChatCompletion | undefined, why: string) => {
        if (!pending) return;
        if (!completion) {
          debugLog("%s: %s: not recorded", options.label, why);
          pending.abandon();
        } else if (!pending.record(request, completion, options.askForTokens)) {
          debugLog("%s: a %s that ended after its rollout returned: not recorded (its trajectory's logs say so)", options.label, dialect.name);
        }
      };
      if (call.body.stream === true) return recordStream(response, dialect.stream(), record);
      const text = await response.text();
      let answer: unknown;
      try {
        answer = JSON.parse(text);
      } catch {
        answer = undefined;
      }
      record(dialect.completion(answer), `the answer is not a ${dialect.name}'s answer`);
      return new Response(text, { status: response.status, statusText: response.statusText, headers: cleanHeaders(response.headers) });
    } catch (error) {
      pending?.abandon();
      throw error;
    }
  };
}

/**
 * Passes the stream through unchanged, recording the completion it describes once its last event
 * has been read (before the caller sees it): a client that stops reading there, or cancels the rest
 * of the body (the `openai` client 7 does, after `[DONE]`), still gets its call recorded.
 */
function recordStream(response: Response, recorder: StreamRecorder, record: (completion: ChatCompletion | undefined, why: string) => void): Response {
  const decoder = new TextDecoder();
  let recorded = false;
  const recordOnce = () => {
    if (recorded) return;
    recorded = true;
    record(recorder.finish(), recorder.error ? `the stream carried an error (${recorder.error})` : "the stream ended before the answer finished");
  };
  const tap = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      recorder.push(decoder.decode(chunk, { stream: true }));
      if (recorder.complete) recordOnce();
      controller.enqueue(chunk);
    },
    flush() {
      recorder.push(decoder.decode());
      recordOnce();
    },
  });
  return new Response(response.body!.pipeThrough(tap), { status: response.status, statusText: response.statusText, headers: cleanHeaders(response.headers) });
}

/** The body was decoded already: a length or encoding header would describe other bytes. */
function cleanHeaders(headers: Headers): Headers {
  const copy = new Headers(headers);
  copy.delete("content-length");
  copy.delete("content-encoding");
  return copy;
}

function pathOf(url: string): string {
  try {
    return new URL(url).pathname;
  } catch {
    return url.split(/[?#]/)[0] ?? ""; // not an absolute URL: the fetch underneath will say so
  }
}

interface ModelCall {
  url: string;
  init: RequestInit;
  body: Record<string, unknown>;
}

/**
 * The URL and API of a model call (a POST to `.../chat/completions`, `.../responses` or
 * `.../messages`), from either form of fetch's arguments; else null.
 */
function modelCall(input: Parameters<typeof fetch>[0], init: RequestInit | undefined, dialects: { responses: Dialect }): { url: string; dialect: Dialect } | null {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
  if (method !== "POST") return null;
  const path = pathOf(url);
  if (path.endsWith("/chat/completions")) return { url, dialect: chatDialect };
  if (path.endsWith("/responses")) return { url, dialect: dialects.responses };
  // Not the Assistants API's thread messages, which share the name.
  if (path.endsWith("/messages") && !path.includes("/threads/")) return { url, dialect: messagesDialect };
  return null;
}

/** The JSON body of a model call to `url`, read from either form of fetch's arguments; else null. */
async function readCall(url: string, input: Parameters<typeof fetch>[0], init: RequestInit | undefined): Promise<ModelCall | null> {
  let text: string;
  let rest: RequestInit;
  if (init?.body !== undefined && init.body !== null) {
    if (typeof init.body === "string") text = init.body;
    else if (init.body instanceof Uint8Array || init.body instanceof ArrayBuffer) text = new TextDecoder().decode(init.body);
    else return null; // a stream or form body: not a JSON request this fetch can read without consuming it
    rest = init;
  } else if (input instanceof Request) {
    text = await input.clone().text();
    rest = { method: "POST", headers: input.headers, signal: input.signal, ...init };
  } else {
    return null;
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) return null;
  const headers = new Headers(rest.headers);
  headers.delete("content-length"); // the body changes length
  return { url, init: { ...rest, method: "POST", headers }, body: body as Record<string, unknown> };
}
