/**
 * `LocalBackend`: starts the gpu-server on this machine (see server-command.ts for which one) and
 * stops it when done.
 * @module
 */
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { z } from "zod";
import { BackendClosedError, ConfigurationError, ServerCrashedError, ServerProtocolError } from "../core/errors";
import { parseOptions } from "../core/options";
import { ReadyLine } from "../core/wire";
import { RemoteBackend } from "./backend";
import { DEFAULT_BASE_MODEL } from "./base-model";
import { findServerCommand, workspaceRoot } from "./server-command";

/** Options of {@link LocalBackend.start}. */
export interface LocalBackendOptions {
  /**
   * Models, checkpoints and logs (default `ART_DATA_DIR`, else `.art` in the current directory; in a
   * clone of art-ts, its `.art`).
   */
  dataDir?: string;
  /** The base model to load at start (default {@link DEFAULT_BASE_MODEL}). */
  baseModel?: string;
  /**
   * Where the server converts packaged GGUF models once (default `ART_MODEL_CACHE`, else
   * `.art/models` beside the default data dir, shared by every data dir).
   */
  modelCache?: string;
  /** `auto` (vllm with CUDA when installed, else hf), `hf` or `vllm`. */
  engine?: "auto" | "hf" | "vllm";
  /** `auto`, `cpu` or `cuda`. */
  device?: "auto" | "cpu" | "cuda";
  /**
   * Trainer processes (default 1): each step's sequences are split across them by token count and
   * their LoRA gradients summed (torch.distributed; gloo on CPU, NCCL on CUDA). Same result as one
   * process, up to float summation order. See the README's "More than one device".
   */
  trainRanks?: number;
  /** One device per trainer rank, e.g. `["cuda:0", "cuda:1"]` (default: `cuda:0..` with CUDA, else `cpu`). */
  trainDevices?: string[];
  /**
   * Shard the frozen base model's decoder layers across the trainer ranks (FSDP2; needs `trainRanks`
   * of 2 or more): each holds 1/N of them, for a base model that does not fit one device.
   */
  trainShardBase?: boolean;
  /** Extra server flags, e.g. `["--max-batch-size", "64"]`. */
  args?: string[];
  /** How long to wait for the server to be ready (default 120 s). */
  startupTimeoutMs?: number;
  /** The folder holding `.art` and `.venv` (default: the art-ts clone this runs from, else the current directory). */
  projectRoot?: string;
  /**
   * The command that starts the server: a path to `art-server`, or an executable and its first
   * arguments (`["/opt/venv/bin/python", "-m", "art_server"]`). Default `ART_SERVER_COMMAND`, else
   * the clone's `.venv`, `.venv/bin/art-server` under `projectRoot`, or `art-server` on PATH.
   */
  serverCommand?: string | string[];
  /** Extra environment for the server (e.g. `HF_HUB_CACHE`). */
  env?: Record<string, string>;
}

const nonEmpty = z.string().min(1);
const LocalBackendOptionsSchema = z.object({
  dataDir: nonEmpty.optional(),
  baseModel: nonEmpty.optional(),
  modelCache: nonEmpty.optional(),
  engine: z.enum(["auto", "hf", "vllm"]).optional(),
  device: z.enum(["auto", "cpu", "cuda"]).optional(),
  trainRanks: z.number().int().min(1).max(1024).optional(),
  trainDevices: z.array(nonEmpty).min(1).optional(),
  trainShardBase: z.boolean().optional(),
  args: z.array(z.string()).optional(),
  startupTimeoutMs: z.number().int().min(1000).max(3_600_000).optional(),
  projectRoot: nonEmpty.optional(),
  serverCommand: z.union([nonEmpty, z.array(nonEmpty).min(1)]).optional(),
  env: z.record(z.string(), z.string()).optional(),
}).strict();

interface RunningServer {
  pid: number;
  exited: Promise<{ exitCode?: number; signal?: string }>;
  kill(signal?: NodeJS.Signals): boolean;
}

/** The server's exit code for a configuration that cannot work (EX_CONFIG; gpu-server core/config.py). */
const CONFIG_EXIT_CODE = 78;
const CONFIG_ERROR_PREFIX = "art-server: configuration error: ";

/** The one line a server that exited with CONFIG_EXIT_CODE wrote about its configuration. */
function configurationLine(logFile: string): string | undefined {
  const line = tailOf(logFile, 5).split("\n").find((l) => l.startsWith(CONFIG_ERROR_PREFIX));
  return line?.slice(CONFIG_ERROR_PREFIX.length);
}

function tailOf(file: string, lines = 30): string {
  try {
    return fs.readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}

/**
 * The gpu-server on this machine, started with execa on a free port with a generated token. Its log
 * goes to `<dataDir>/logs/server-<time>.log`; it stops on `close()` or when this process exits. A
 * server already running on the same data dir is reused (one server per data dir keeps it whole).
 *
 * ```ts
 * const backend = await LocalBackend.start();              // SmolLM2-135M-Instruct on this machine
 * ```
 */
export class LocalBackend extends RemoteBackend {
  /** The server's log file (undefined when an already running server was reused). */
  readonly logFile: string | undefined;
  private readonly server: RunningServer | undefined;
  private crashed: ServerCrashedError | undefined;

  private constructor(ready: ReadyLine, server?: RunningServer, logFile?: string) {
    super({ url: ready.url, token: ready.token });
    this.server = server;
    this.logFile = logFile;
  }

  /** Starts (or reuses) the local server and waits for its ready line. */
  static async start(options: LocalBackendOptions = {}): Promise<LocalBackend> {
    options = parseOptions("LocalBackend.start", LocalBackendOptionsSchema, options);
    const root = path.resolve(options.projectRoot ?? workspaceRoot());
    const dataDir = path.resolve(options.dataDir ?? (process.env.ART_DATA_DIR || path.join(root, ".art")));
    const reused = await reuse(dataDir);
    if (reused) return new LocalBackend(reused);
    const server = findServerCommand({ serverCommand: options.serverCommand, root: options.projectRoot });
    try {
      fs.mkdirSync(path.join(dataDir, "logs"), { recursive: true });
      fs.accessSync(path.join(dataDir, "logs"), fs.constants.W_OK);
    } catch (error) {
      throw new ConfigurationError(`LocalBackend.start: dataDir ${dataDir} cannot be written (${(error as NodeJS.ErrnoException).code ?? String(error)}); ` +
        "pick a folder this user can write");
    }
    const logFile = path.join(dataDir, "logs", `server-${new Date().toISOString().replace(/[:.]/g, "-")}.log`);
    const args = [...server.args, "--port", "0", "--data-dir", dataDir, "--engine", options.engine ?? "auto",
      "--device", options.device ?? "auto", "--base-model", options.baseModel ?? DEFAULT_BASE_MODEL,
      "--model-cache", options.modelCache ?? process.env.ART_MODEL_CACHE ?? path.join(root, ".art", "models"),
      // The server stops when this process is gone, even when it is killed (a kernel restarted or killed).
      "--parent-pid", String(process.pid),
      ...(options.trainRanks !== undefined ? ["--train-ranks", String(options.trainRanks)] : []),
      ...(options.trainDevices !== undefined ? ["--train-devices", options.trainDevices.join(",")] : []),
      ...(options.trainShardBase ? ["--train-shard-base"] : []),
      ...(options.args ?? [])];
    const { execa } = await import("execa");
    const child = execa(server.command, args, {
      stdout: "pipe", stderr: { file: logFile }, stdin: "ignore", reject: false, cleanup: true,
      // Its own process group: Jupyter interrupts a kernel by signalling the kernel's whole group
      // (Kernel > Interrupt), which would stop the server too. It still ends with this process
      // (`cleanup` above, and --parent-pid when this one is killed).
      detached: true,
      env: { PYTHONUNBUFFERED: "1", ...(options.env ?? {}) },
    });
    const exited = child.then((r) => ({ exitCode: r.exitCode, signal: r.signal }));
    const ready = await new Promise<ReadyLine>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new ServerCrashedError(`the gpu-server did not start within ${(options.startupTimeoutMs ?? 120_000) / 1000} s; ` +
          `its log (${logFile}) ends:\n${tailOf(logFile)}`, tailOf(logFile)));
      }, options.startupTimeoutMs ?? 120_000);
      readline.createInterface({ input: child.stdout! }).on("line", (line) => {
        if (!line.startsWith("{")) return;
        clearTimeout(timer);
        let parsed: ReturnType<typeof ReadyLine.safeParse> | undefined;
        try {
          parsed = ReadyLine.safeParse(JSON.parse(line));
        } catch {
          parsed = undefined;
        }
        if (parsed?.success) return resolve(parsed.data);
        child.kill("SIGKILL");
        reject(new ServerProtocolError(`LocalBackend.start: ${server.command} (${server.source}) printed ${JSON.stringify(line.slice(0, 200))}, ` +
          "not art-server's ready line: is it an art-server of the same version as this client?"));
      });
      void exited.then(({ exitCode }) => {
        clearTimeout(timer);
        const configLine = exitCode === CONFIG_EXIT_CODE ? configurationLine(logFile) : undefined;
        if (configLine) return reject(new ConfigurationError(configLine));
        reject(new ServerCrashedError(`the gpu-server exited during start-up (code ${exitCode}); its log (${logFile}) ends:\n${tailOf(logFile)}`,
          tailOf(logFile)));
      });
    });
    const running: RunningServer = { pid: child.pid!, exited, kill: (signal) => child.kill(signal) };
    const backend = new LocalBackend(ready, running, logFile);
    void exited.then(({ exitCode, signal }) => {
      if (backend.closing) return;
      const tail = tailOf(logFile);
      backend.crashed = new ServerCrashedError(`the gpu-server (pid ${running.pid}) died (${signal ?? `exit ${exitCode}`}); ` +
        `its log (${logFile}) ends:\n${tail}\nRe-run the cell that starts the backend (or start a new LocalBackend on the same data dir): ` +
        "every model resumes at its latest step.", tail);
    });
    const stop = () => running.kill("SIGTERM");
    process.once("exit", stop);
    backend.removeExitHook = () => process.off("exit", stop);
    return backend;
  }

  private closing = false;
  private removeExitHook: () => void = () => {};

  /** The server process id (undefined when reusing one started elsewhere). */
  get pid(): number | undefined {
    return this.server?.pid;
  }

  // A request that fails while close() stops the server failed because of the close: say that, whichever
  // way the dying server ended it (refused, cut mid-answer), so callers see one error for one cause.
  protected override unreachable(requestPath: string, error: unknown): Error {
    return this.closedError(error) ?? this.crashed ?? super.unreachable(requestPath, error);
  }

  /** A connection that broke mid-answer: when the server died, say so with its log (its exit is seen within a second). */
  protected override async interrupted(requestPath: string, error: unknown): Promise<Error> {
    if (this.server && !this.crashed && !this.closing) await Promise.race([this.server.exited, new Promise((r) => setTimeout(r, 1000))]);
    await new Promise((r) => setImmediate(r));
    return this.closedError(error) ?? this.crashed ?? super.interrupted(requestPath, error);
  }

  private closedError(cause?: unknown): BackendClosedError | undefined {
    if (!this.closing) return undefined;
    return new BackendClosedError(`this LocalBackend was closed (backend.close() ran, e.g. in a cell that ran earlier), and its ` +
      "server has stopped. Re-run the cell that starts the backend (connectBackend or LocalBackend.start) and " +
      "the one that registers the model, then this cell.", cause === undefined ? undefined : { cause });
  }

  override unusable(): Error | undefined {
    return this.closedError() ?? this.crashed;
  }

  /** Stops the server this backend started (waits for it to exit). */
  override async close(): Promise<void> {
    if (!this.server || this.closing) return;
    this.closing = true;
    this.removeExitHook();
    this.server.kill("SIGTERM");
    await this.server.exited;
  }
}

/** A server already running on this data dir (its server.json, and it answers). */
async function reuse(dataDir: string): Promise<ReadyLine | null> {
  const file = path.join(dataDir, "server.json");
  if (!fs.existsSync(file)) return null;
  try {
    const ready = ReadyLine.parse(JSON.parse(fs.readFileSync(file, "utf8")));
    process.kill(ready.pid, 0);
    const response = await fetch(`${ready.url}/health`);
    return response.ok ? ready : null;
  } catch {
    return null; // stale: the server died; the next start takes over the data dir
  }
}
