/**
 * Backends: where models are served and trained. `RemoteBackend` talks to a gpu-server at a URL
 * with a bearer token; `LocalBackend` (local-backend.ts) starts one on this machine.
 * @module
 */
import readline from "node:readline";
import { Readable } from "node:stream";
import { z } from "zod";
import { ServerApiError, ServerUnreachableError, UnauthorizedError } from "./errors";
import { ErrorBody, TrainLine } from "./wire";

/** What models need from a backend. */
export interface Backend {
  /** The server's base URL, e.g. `http://127.0.0.1:8000`. */
  readonly url: string;
  /** The bearer token. */
  readonly token: string;
  /** A JSON request, validated with `schema`; throws typed errors. */
  request<T>(method: "GET" | "POST", path: string, schema: z.ZodType<T>, body?: unknown): Promise<T>;
  /** A streaming NDJSON request; `onLine` sees every line; resolves with all of them. */
  stream(path: string, body: unknown, onLine?: (line: TrainLine) => void): Promise<TrainLine[]>;
  /** Frees what the backend holds (a local server process). */
  close(): Promise<void>;
  /** Why the backend cannot be used any more (closed, or its server died), or undefined while it can. */
  unusable?(): Error | undefined;
}

/** Options of a {@link RemoteBackend}. */
export interface RemoteBackendOptions {
  /** The server's base URL (put TLS in front of it with a reverse proxy for remote use). */
  url: string;
  /** The server's bearer token (`--token` / `ART_SERVER_TOKEN`). */
  token: string;
}

/**
 * A gpu-server on another machine (or anywhere with a URL).
 *
 * ```ts
 * const backend = new RemoteBackend({ url: "https://gpu.example.com", token: process.env.ART_SERVER_TOKEN! });
 * ```
 */
export class RemoteBackend implements Backend {
  readonly url: string;
  readonly token: string;

  constructor(options: RemoteBackendOptions) {
    this.url = options.url.replace(/\/+$/, "");
    this.token = options.token;
  }

  /** Turns a transport failure into a typed error; LocalBackend adds what it knows of the process. */
  protected unreachable(path: string, error: unknown): Error {
    return new ServerUnreachableError(`cannot reach the gpu-server at ${this.url} (${path}): ${String((error as Error)?.message ?? error)}. ` +
      "Is it running, and is the URL right?");
  }

  /** Why this backend cannot be used any more; a remote one always can be tried. */
  unusable(): Error | undefined {
    return undefined;
  }

  private async send(method: string, path: string, body: unknown): Promise<Response> {
    const unusable = this.unusable();
    if (unusable) throw unusable;
    let response: Response;
    try {
      response = await fetch(`${this.url}${path}`, {
        method,
        headers: { Authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw this.unreachable(path, error);
    }
    if (!response.ok) throw await apiError(response, path);
    return response;
  }

  async request<T>(method: "GET" | "POST", path: string, schema: z.ZodType<T>, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body);
    return schema.parse(await response.json());
  }

  async stream(path: string, body: unknown, onLine?: (line: TrainLine) => void): Promise<TrainLine[]> {
    const response = await this.send("POST", path, body);
    if (!response.body) throw new ServerApiError(`empty stream from ${path}`, response.status, null);
    const lines: TrainLine[] = [];
    const reader = readline.createInterface({ input: Readable.fromWeb(response.body as import("node:stream/web").ReadableStream) });
    for await (const raw of reader) {
      if (!raw.trim()) continue;
      const line = TrainLine.parse(JSON.parse(raw));
      if (line.type === "error") throw new ServerApiError(line.error.message, 500, line.error.code ?? null);
      lines.push(line);
      onLine?.(line);
    }
    return lines;
  }

  async close(): Promise<void> {}
}

async function apiError(response: Response, path: string): Promise<Error> {
  const text = await response.text();
  let message = text.slice(0, 500);
  let code: string | null = null;
  let param: string | null = null;
  try {
    const body = ErrorBody.parse(JSON.parse(text));
    message = body.error.message;
    code = body.error.code ?? null;
    param = body.error.param ?? null;
  } catch {
    // not an OpenAI-style body: keep the text
  }
  if (response.status === 401) {
    return new UnauthorizedError(`the gpu-server refused the token (${message}); pass the token it printed, or --token`, 401, code, param);
  }
  return new ServerApiError(`${path}: ${message}`, response.status, code, param);
}
