/**
 * The recording fetch: what a model hands to any framework that takes an OpenAI-compatible
 * endpoint and a custom `fetch`. On a trained model's endpoint it asks every chat completion for
 * token ids and logprobs; inside the model's rollout (rollout.ts) it records each completed call,
 * JSON or streamed, into the rollout's trajectory before the caller sees the end of the answer.
 * @module
 */
import type OpenAI from "openai";
import { debugLog, startCall, type RecordedRequest } from "./rollout-context";
import { SseAccumulator } from "./sse-accumulator";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

/** What a {@link recordingFetch} records for, and how it talks to its endpoint. */
export interface RecordingFetchOptions {
  /** The model whose rollouts the calls are recorded into. */
  owner: object;
  /** The model's name, for debug lines. */
  label: string;
  /** Adds `logprobs: true, return_token_ids: true` to chat completions (our server); false for other endpoints. */
  askForTokens: boolean;
  /** The fetch underneath (default: the global fetch). */
  base?: typeof fetch;
}

/** A fetch that records chat completions into the owner's current rollout (see the module comment). */
export function recordingFetch(options: RecordingFetchOptions): typeof fetch {
  const base = options.base ?? ((input, init) => fetch(input, init));
  return async (input, init) => {
    const url = chatCompletionsUrl(input, init);
    if (url === null) return base(input, init);
    const pending = startCall(options.owner);
    if (!pending) debugLog("%s: a chat completion outside any rollout of this model: not recorded", options.label);
    // Nothing to add to the request and nothing to record: its body is left unread.
    if (!pending && !options.askForTokens) return base(input, init);
    try {
      const call = await readChatCall(url, input, init);
      if (!call) {
        pending?.abandon();
        return base(input, init);
      }
      if (options.askForTokens) call.body = { ...call.body, logprobs: true, return_token_ids: true };
      const response = await base(call.url, { ...call.init, body: JSON.stringify(call.body) });
      if (!pending) return response;
      if (!response.ok || !response.body) {
        debugLog("%s: a chat completion answered %d: not recorded", options.label, response.status);
        pending.abandon();
        return response;
      }
      const request: RecordedRequest = {
        messages: Array.isArray(call.body.messages) ? call.body.messages : [],
        ...(Array.isArray(call.body.tools) ? { tools: call.body.tools } : {}),
      };
      const record = (completion: ChatCompletion | undefined, why: string) => {
        if (!completion) {
          debugLog("%s: %s: not recorded", options.label, why);
          pending.abandon();
        } else if (!pending.record(request, completion, options.askForTokens)) {
          debugLog("%s: a chat completion that ended after its rollout returned: not recorded (its trajectory's logs say so)", options.label);
        }
      };
      if (call.body.stream === true) return recordStream(response, record);
      const text = await response.text();
      let completion: ChatCompletion | undefined;
      try {
        completion = JSON.parse(text) as ChatCompletion;
      } catch {
        completion = undefined;
      }
      record(completion?.choices ? completion : undefined, "the answer is not a chat completion");
      return new Response(text, { status: response.status, statusText: response.statusText, headers: cleanHeaders(response.headers) });
    } catch (error) {
      pending?.abandon();
      throw error;
    }
  };
}

/** Passes the stream through unchanged, recording the completion it describes when it ends. */
function recordStream(response: Response, record: (completion: ChatCompletion | undefined, why: string) => void): Response {
  const accumulator = new SseAccumulator();
  const decoder = new TextDecoder();
  const recorder = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      accumulator.push(decoder.decode(chunk, { stream: true }));
      controller.enqueue(chunk);
    },
    // Runs before the caller reads the end of the stream, so the call is in the trajectory by then.
    flush() {
      accumulator.push(decoder.decode());
      record(accumulator.finish(), accumulator.error ? `the stream carried an error (${accumulator.error})` : "the stream ended before every choice finished");
    },
  });
  return new Response(response.body!.pipeThrough(recorder), { status: response.status, statusText: response.statusText, headers: cleanHeaders(response.headers) });
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

interface ChatCall {
  url: string;
  init: RequestInit;
  body: Record<string, unknown>;
}

/** The URL of a POST to `.../chat/completions`, from either form of fetch's arguments; else null. */
function chatCompletionsUrl(input: Parameters<typeof fetch>[0], init: RequestInit | undefined): string | null {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
  return method === "POST" && pathOf(url).endsWith("/chat/completions") ? url : null;
}

/** The JSON body of a chat-completions call to `url`, read from either form of fetch's arguments; else null. */
async function readChatCall(url: string, input: Parameters<typeof fetch>[0], init: RequestInit | undefined): Promise<ChatCall | null> {
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
