/**
 * `LocalBackend`: starts the bundled gpu-server from the project's `.venv` and stops it when done.
 * @module
 */
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { RemoteBackend } from "./backend";
import { DEFAULT_BASE_MODEL } from "./base-model";
import { BackendClosedError, ConfigurationError, ServerCrashedError } from "./errors";
import { ReadyLine } from "./wire";

/** Options of {@link LocalBackend.start}. */
export interface LocalBackendOptions {
  /** Models, checkpoints and logs (default `<project>/.art`). */
  dataDir?: string;
  /** The base model to load at start (default {@link DEFAULT_BASE_MODEL}). */
  baseModel?: string;
  /**
   * Where the server converts packaged GGUF models once (default `ART_MODEL_CACHE`, else
   * `<project>/.art/models`, shared by every data dir).
   */
  modelCache?: string;
  /** `auto` (vllm with CUDA when installed, else hf), `hf` or `vllm`. */
  engine?: "auto" | "hf" | "vllm";
  /** `auto`, `cpu` or `cuda`. */
  device?: "auto" | "cpu" | "cuda";
  /** Extra server flags, e.g. `["--max-batch-size", "64"]`. */
  args?: string[];
  /** How long to wait for the server to be ready (default 120 s). */
  startupTimeoutMs?: number;
  /** The project root holding `.venv` (default: found from this file). */
  projectRoot?: string;
  /** Extra environment for the server (e.g. `HF_HUB_CACHE`). */
  env?: Record<string, string>;
}

interface RunningServer {
  pid: number;
  exited: Promise<{ exitCode?: number; signal?: string }>;
  kill(signal?: NodeJS.Signals): boolean;
}

/** The server's exit code for a configuration that cannot work (EX_CONFIG; gpu-server config.py). */
const CONFIG_EXIT_CODE = 78;
const CONFIG_ERROR_PREFIX = "art-server: configuration error: ";

/** The one line a server that exited with CONFIG_EXIT_CODE wrote about its configuration. */
function configurationLine(logFile: string): string | undefined {
  const line = tailOf(logFile, 5).split("\n").find((l) => l.startsWith(CONFIG_ERROR_PREFIX));
  return line?.slice(CONFIG_ERROR_PREFIX.length);
}

/** The project root (holding `.venv` and the default data dir `.art`). */
export const PROJECT_ROOT = path.resolve(__dirname, "..");

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
    const root = options.projectRoot ?? PROJECT_ROOT;
    const dataDir = path.resolve(options.dataDir ?? path.join(root, ".art"));
    const reused = await reuse(dataDir);
    if (reused) return new LocalBackend(reused);
    const python = path.join(root, ".venv", "bin", "python");
    if (!fs.existsSync(python)) {
      throw new ConfigurationError(`no Python environment at ${path.dirname(path.dirname(python))}: run \`npm run setup\` in ${root}`);
    }
    try {
      fs.mkdirSync(path.join(dataDir, "logs"), { recursive: true });
      fs.accessSync(path.join(dataDir, "logs"), fs.constants.W_OK);
    } catch (error) {
      throw new ConfigurationError(`LocalBackend.start: dataDir ${dataDir} cannot be written (${(error as NodeJS.ErrnoException).code ?? String(error)}); ` +
        "pick a folder this user can write");
    }
    const logFile = path.join(dataDir, "logs", `server-${new Date().toISOString().replace(/[:.]/g, "-")}.log`);
    const args = ["-m", "art_server", "--port", "0", "--data-dir", dataDir, "--engine", options.engine ?? "auto",
      "--device", options.device ?? "auto", "--base-model", options.baseModel ?? DEFAULT_BASE_MODEL,
      "--model-cache", options.modelCache ?? process.env.ART_MODEL_CACHE ?? path.join(root, ".art", "models"),
      // The server stops when this process is gone, even when it is killed (a kernel restarted or killed).
      "--parent-pid", String(process.pid), ...(options.args ?? [])];
    const { execa } = await import("execa");
    const child = execa(python, args, {
      stdout: "pipe", stderr: { file: logFile }, stdin: "ignore", reject: false, cleanup: true,
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
        resolve(ReadyLine.parse(JSON.parse(line)));
      });
      void exited.then(({ exitCode }) => {
        clearTimeout(timer);
        const configLine = exitCode === CONFIG_EXIT_CODE ? configurationLine(logFile) : undefined;
        if (configLine) return reject(new ConfigurationError(configLine));
        reject(new ServerCrashedError(`the gpu-server exited during start-up (code ${exitCode}); its log (${logFile}) ends:\n${tailOf(logFile)}`,
          tailOf(logFile)));
      });
    });
    const server: RunningServer = { pid: child.pid!, exited, kill: (signal) => child.kill(signal) };
    const backend = new LocalBackend(ready, server, logFile);
    void exited.then(({ exitCode, signal }) => {
      if (backend.closing) return;
      const tail = tailOf(logFile);
      backend.crashed = new ServerCrashedError(`the gpu-server (pid ${server.pid}) died (${signal ?? `exit ${exitCode}`}); ` +
        `its log (${logFile}) ends:\n${tail}\nRe-run the cell that starts the backend (or start a new LocalBackend on the same data dir): ` +
        "every model resumes at its latest step.", tail);
    });
    const stop = () => server.kill("SIGTERM");
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

  protected override unreachable(requestPath: string, error: unknown): Error {
    return this.crashed ?? super.unreachable(requestPath, error);
  }

  override unusable(): Error | undefined {
    if (this.closing) {
      return new BackendClosedError(`this LocalBackend was closed (backend.close() ran, e.g. in a cell that ran earlier), and its ` +
        "server has stopped. Re-run the cell that starts the backend (connectBackend or LocalBackend.start) and " +
        "the one that registers the model, then this cell.");
    }
    return this.crashed;
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
