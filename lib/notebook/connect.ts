/**
 * One call that gives a notebook its backend: the gpu-server named by `ART_SERVER_URL` (and
 * `ART_SERVER_TOKEN`) when set, e.g. a GPU box driven from a laptop; otherwise a local server
 * started on a fresh data dir, so every run starts at step 0 with the same LoRA initialisation.
 * @module
 */
import path from "node:path";
import { z } from "zod";
import { RemoteBackend } from "../client/backend";
import { LocalBackend, type LocalBackendOptions } from "../client/local-backend";
import { workspaceRoot } from "../client/server-command";
import { ConfigurationError } from "../core/errors";
import { parseOptions, safeNameOption } from "../core/options";

/** Options of {@link connectBackend}. */
export interface ConnectOptions {
  /** Names the run's data dir: `.art/runs/<run>-<time>/` (letters, digits, `.`, `_`, `-`). */
  run: string;
  /** The base model of a local server (default {@link DEFAULT_BASE_MODEL}). */
  baseModel?: string;
  /** `auto`, `hf` or `vllm` (local server only). */
  engine?: LocalBackendOptions["engine"];
  /** A data dir to use instead of a fresh one (e.g. to continue a run). */
  dataDir?: string;
  /** Read `ART_SERVER_URL` / `ART_SERVER_TOKEN` from here (default `process.env`). */
  env?: NodeJS.ProcessEnv;
}

const ConnectOptionsSchema = z.object({
  run: safeNameOption,
  baseModel: z.string().min(1).optional(),
  engine: z.enum(["auto", "hf", "vllm"]).optional(),
  dataDir: z.string().optional(),
  env: z.record(z.string(), z.string().optional()).optional(),
}).strict();

/** The local backend each run name started last in this process (a notebook kernel). */
const started = new Map<string, LocalBackend>();

/** A backend as {@link connectBackend} returns it. */
export type ConnectedBackend = RemoteBackend & {
  /** Where it runs, in words, for the notebook to print (`local gpu-server (pid 123) on .art/runs/...`). */
  describe: string;
};

/**
 * A backend for a notebook run. Calling it again for the same `run` (re-running the cell) stops
 * the server it started before and starts a fresh run at step 0.
 */
export async function connectBackend(options: ConnectOptions): Promise<ConnectedBackend> {
  parseOptions("connectBackend", ConnectOptionsSchema, options);
  const env = options.env ?? process.env;
  const url = env.ART_SERVER_URL;
  if (url) {
    const token = env.ART_SERVER_TOKEN;
    if (!token) throw new ConfigurationError("ART_SERVER_URL is set but ART_SERVER_TOKEN is not: set it to the server's --token");
    return Object.assign(new RemoteBackend({ url, token }), { describe: `remote gpu-server at ${url}` });
  }
  // Re-running a notebook's server cell starts a fresh run; the previous run's server stops.
  await started.get(options.run)?.close();
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*/, "");
  const dataDir = options.dataDir || path.join(workspaceRoot(), ".art", "runs", `${options.run}-${stamp}`);
  const backend = await LocalBackend.start({ dataDir, baseModel: options.baseModel, engine: options.engine });
  started.set(options.run, backend);
  return Object.assign(backend, { describe: `local gpu-server (pid ${backend.pid ?? "reused"}) on ${dataDir}` });
}
