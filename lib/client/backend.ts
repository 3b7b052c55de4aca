/**
 * Backends: where models are served and trained. `RemoteBackend` talks to a gpu-server at a URL
 * with a bearer token; `LocalBackend` (local-backend.ts) starts one on this machine.
 * @module
 */
import readline from "node:readline";
import { Readable } from "node:stream";
import { z } from "zod";
import { registeredModelFromWire } from "../core/convert";
import {
  ModelNotRegisteredError, ServerApiError, ServerProtocolError, ServerUnreachableError, StoppedError, TrainingStepError, UnauthorizedError,
} from "../core/errors";
import { httpUrlOption, parseOptions } from "../core/options";
import type { RegisteredModel } from "../core/results";
import { ErrorBody, type ForkBody, ModelInfo, type StreamLine, TrainLine } from "../core/wire";

/** What models need from a backend. */
export interface Backend {
  /** The server's base URL, e.g. `http://127.0.0.1:8000`. */
  readonly url: string;
  /** The bearer token. */
  readonly token: string;
  /** A JSON request, validated with `schema`; throws typed errors. */
  request<T>(method: "GET" | "POST", path: string, schema: z.ZodType<T>, body?: unknown): Promise<T>;
  /**
   * @internal A streaming NDJSON request in the wire's form (what `model.train` reads); `onLine`
   * sees every line; resolves with all of them (an error line throws). `signal` ends the request
   * early (a {@link StoppedError}); the server then rolls back a step it has not committed.
   */
  stream(path: string, body: unknown, onLine?: (line: StreamLine) => void, signal?: AbortSignal): Promise<StreamLine[]>;
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

const RemoteBackendOptionsSchema = z.object({
  url: httpUrlOption,
  token: z.string().min(1),
}).strict();

/** Where {@link RemoteBackend.forkCheckpoint} forks from. */
export interface ForkCheckpointOptions {
  /** The parent model's name (a model this server, or one started with the same data dir, has trained). */
  fromModel: string;
  /** The parent's project (default: the model's own). */
  fromProject?: string;
  /** Fork the parent's latest checkpoint at or before this step (default: its latest). */
  notAfterStep?: number;
  /** Replace the checkpoints and history of a model that has trained already (default: refused with a 409). */
  overwrite?: boolean;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const ForkCheckpointOptionsSchema = z.object({
  fromModel: z.string().regex(NAME, "must be a model name: 1-64 letters, digits, '.', '_' or '-'"),
  fromProject: z.string().regex(NAME, "must be a project name: 1-64 letters, digits, '.', '_' or '-'").optional(),
  notAfterStep: z.number().int().min(0).optional(),
  overwrite: z.boolean().optional(),
}).strict();

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
    const { url, token } = parseOptions("new RemoteBackend", RemoteBackendOptionsSchema, options);
    this.url = url.replace(/\/+$/, "");
    this.token = token;
  }

  /** Turns a transport failure into a typed error; LocalBackend adds what it knows of the process. */
  protected unreachable(path: string, error: unknown): Error {
    const cause = (error as { cause?: { message?: string } })?.cause?.message;
    return new ServerUnreachableError(`cannot reach the gpu-server at ${this.url} (${path}): ${String((error as Error)?.message ?? error)}` +
      `${cause ? ` (${cause})` : ""}. Is it running, and is the URL right?`, { cause: error });
  }

  /** Why this backend cannot be used any more; a remote one always can be tried. */
  unusable(): Error | undefined {
    return undefined;
  }

  private async send(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
    const unusable = this.unusable();
    if (unusable) throw unusable;
    let response: Response;
    try {
      response = await fetch(`${this.url}${path}`, {
        method,
        headers: { Authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        ...(signal ? { signal } : {}),
      });
    } catch (error) {
      throw signal?.aborted ? stopped(path, error) : this.unreachable(path, error);
    }
    if (!response.ok) throw await apiError(response, path);
    return response;
  }

  async request<T>(method: "GET" | "POST", path: string, schema: z.ZodType<T>, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body);
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      throw await this.interrupted(path, error);
    }
    return parseAnswer(path, schema, text);
  }

  /** @internal See {@link Backend.stream}. */
  async stream(path: string, body: unknown, onLine?: (line: StreamLine) => void, signal?: AbortSignal): Promise<StreamLine[]> {
    const response = await this.send("POST", path, body, signal);
    if (!response.body) throw new ServerProtocolError(`${path}: the server answered ${response.status} with no body`);
    const lines: StreamLine[] = [];
    const input = Readable.fromWeb(response.body as import("node:stream/web").ReadableStream);
    // readline stops listening when the loop is left early (an error line, a callback that threw); an
    // abort after that would error a stream nobody listens to, an uncaught exception that ends the
    // process. Errors while reading reach the loop through readline; later ones are nobody's news.
    input.on("error", () => {});
    const reader = readline.createInterface({ input });
    try {
      for await (const raw of reader) {
        if (!raw.trim()) continue;
        const line = parseAnswer(path, TrainLine, raw);
        if (line.type === "error") {
          throw new TrainingStepError(`${path}: ${line.error.message}`, line.status ?? 500, line.error.code ?? null);
        }
        lines.push(line);
        onLine?.(line);
      }
    } catch (error) {
      if (error instanceof ServerApiError || error instanceof ServerProtocolError) throw error;
      if (signal?.aborted) throw stopped(path, error);
      throw await this.interrupted(path, error);
    } finally {
      // Left early, the response may still be open: release it rather than leave it to the server.
      reader.close();
      input.destroy();
    }
    return lines;
  }

  /**
   * Starts `model` (registered here, on the same base model and LoRA config) from another model's
   * checkpoint: the parent's latest at or before `notAfterStep`. The model then serves exactly that
   * adapter at that step number, and training continues from there with the parent's optimizer
   * state; the parent is only read. Its history up to that step comes along.
   *
   * ```ts
   * const branch = new TrainableModel({ name: "agent-lr-low", project: "tictactoe" });
   * await branch.register(backend);
   * await backend.forkCheckpoint(branch, { fromModel: "agent", notAfterStep: 20 });
   * ```
   */
  // `model` is a TrainableModel registered here; named by its shape so that this file need not import
  // model.ts, which imports it.
  async forkCheckpoint(model: { readonly name: string; readonly backend: Backend; getStep(): Promise<number> },
    options: ForkCheckpointOptions): Promise<RegisteredModel> {
    const { fromModel, fromProject, notAfterStep, overwrite } = parseOptions("backend.forkCheckpoint", ForkCheckpointOptionsSchema, options);
    if (model.backend !== this) {
      throw new ModelNotRegisteredError(`backend.forkCheckpoint: model ${model.name} is registered on another backend; ` +
        "fork on the backend it is registered on");
    }
    const info = await this.request("POST", `/v1/art/models/${encodeURIComponent(model.name)}/fork`, ModelInfo, {
      from_model: fromModel,
      ...(fromProject === undefined ? {} : { from_project: fromProject }),
      ...(notAfterStep === undefined ? {} : { not_after_step: notAfterStep }),
      ...(overwrite === undefined ? {} : { overwrite }),
    } satisfies ForkBody);
    await model.getStep();  // the model's own idea of its step follows the fork
    return registeredModelFromWire(info);
  }

  /** The connection broke while an answer was read (the server died, or the network dropped). */
  protected async interrupted(path: string, error: unknown): Promise<Error> {
    return new ServerUnreachableError(`the connection to the gpu-server at ${this.url} broke while reading ${path} ` +
      `(${String((error as Error)?.message ?? error)}); check that the server is still running, then retry`, { cause: error });
  }

  async close(): Promise<void> {}
}

function stopped(path: string, error: unknown): StoppedError {
  return new StoppedError(`${path}: stopped before the server answered (the request was aborted); a training step it ` +
    "had not committed is rolled back", { cause: error });
}

/** Parses one answer (JSON) with `schema`; anything else is a {@link ServerProtocolError}. */
function parseAnswer<T>(path: string, schema: z.ZodType<T>, text: string): T {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ServerProtocolError(`${path}: the server's answer is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ServerProtocolError(`${path}: the server's answer does not have the shape this client expects ` +
      `(${issue?.path.join(".") || "answer"}: ${issue?.message}); are the client and the server the same version?`);
  }
  return parsed.data;
}

async function apiError(response: Response, path: string): Promise<Error> {
  const text = await response.text().catch(() => "");
  let message = text.slice(0, 500) || response.statusText;
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
