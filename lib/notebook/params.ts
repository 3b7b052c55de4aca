/**
 * A notebook's parameters cell: defaults, a short configuration for tests (`ART_SMOKE=1`), and an
 * environment variable per parameter (`steps` -> `ART_STEPS`, `baseModel` -> `ART_BASE_MODEL`),
 * so a test or a GPU box changes a run without editing the notebook.
 * @module
 */
import { ArtError } from "../core/errors";
import { nearestName } from "../core/options";
import { notice } from "../display/notice";
import { showTable } from "../display/table";

/** The types a notebook parameter can have (an `ART_<NAME>` variable is parsed as the default's). */
export type ParamValue = string | number | boolean;

/** Thrown when an environment variable does not parse as its parameter's type. */
export class ParameterError extends ArtError {
  constructor(message: string) {
    super(message);
    this.name = "ParameterError";
  }
}

/** `learningRate` -> `ART_LEARNING_RATE`. */
export function envName(key: string): string {
  return "ART_" + key.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase();
}

function parseAs(example: ParamValue, raw: string, variable: string): ParamValue {
  if (typeof example === "number") {
    const value = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(value)) throw new ParameterError(`${variable}=${JSON.stringify(raw)} is not a number`);
    return value;
  }
  if (typeof example === "boolean") {
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off)$/i.test(raw)) return false;
    throw new ParameterError(`${variable}=${JSON.stringify(raw)} is not a boolean (use 1/0, true/false)`);
  }
  return raw;
}

/**
 * `ART_` variables that the project's own tools read (the server's flags, set-up, the kernel,
 * connectBackend, the tests), so a notebook that has no parameter of that name stays quiet about them.
 */
export const PROJECT_VARIABLES: ReadonlySet<string> = new Set([
  // the server (gpu-server/art_server/core/config.py: one per flag) and the clients that start or reach it
  "ART_BASE_MODEL", "ART_BODY_TIMEOUT", "ART_DATA_DIR", "ART_DEVICE", "ART_DOCS", "ART_DTYPE", "ART_ENGINE", "ART_HEADER_TIMEOUT",
  "ART_HOST", "ART_LOG_LEVEL", "ART_MAX_BATCH_SIZE", "ART_MAX_BODY_BYTES", "ART_MAX_HEADERS", "ART_MAX_HEADER_BYTES", "ART_MAX_N", "ART_GPU_COST_PER_HOUR_USD",
  "ART_REPORT", "ART_REPORT_TRAJECTORIES",
  "ART_MODEL_CACHE", "ART_PORT", "ART_SERVER_TOKEN", "ART_VLLM_ARGS", "ART_VLLM_COMMAND", "ART_VLLM_GPU_MEMORY_UTILIZATION",
  "ART_VLLM_MAX_LORA_RANK", "ART_VLLM_STARTUP_TIMEOUT", "ART_VLLM_SLEEP_MODE", "ART_VLLM_CPU_KV_CACHE_GIB",
  "ART_INFERENCE_DEVICES", "ART_TRAIN_RANKS", "ART_TRAIN_LOCAL_RANKS", "ART_TRAIN_DEVICES", "ART_TRAIN_MASTER_ADDR", "ART_TRAIN_MASTER_PORT",
  "ART_TRAIN_RENDEZVOUS_TIMEOUT", "ART_TRAIN_RANK_TIMEOUT", "ART_TRAIN_THREADS_PER_RANK", "ART_TRAIN_SHARD_BASE", "ART_RANK_PARENT", "ART_SERVER_COMMAND", "ART_SERVER_URL", "ART_FAULT", "ART_ENGINE_THREADS", "ART_OPENMP_DEFAULTS",
  "ART_BASELINE_MODEL", "ART_BASELINE_BASE_URL", "ART_BASELINE_API_KEY", "ART_GENERATOR_MODEL", "ART_GENERATOR_BASE_URL",
  "ART_GENERATOR_API_KEY", "ART_JUDGE_MODEL", "ART_JUDGE_BASE_URL", "ART_JUDGE_API_KEY",
  // set-up, JupyterLab, the kernel, the tests
  "ART_EXTRAS", "ART_TORCH", "ART_PYTHON", "ART_CHROMIUM", "ART_LAB_IP", "ART_LAB_PORT", "ART_LAB_TOKEN", "ART_TS_KERNEL",
  "ART_PROJECT_ROOT", "ART_SMOKE", "ART_NOTEBOOK_CELL_TIMEOUT", "ART_FUZZ_EXAMPLES", "ART_KEEP_PACKAGE_TEST", "ART_RELIABILITY_REPORT",
  "ART_HARDWARE", "ART_TEST_TIER", "ART_ADAPTER_SWITCH", "ART_CONTRACT_EXAMPLES", "ART_CONTRACT_ADAPTER", "ART_CONTRACT_MODEL",
  "ART_CONTRACT_VOCABULARY", "ART_CONTRACT_PARENT", "ART_TEST_GEMMA_VLLM",
]);

/** True when `ART_SMOKE` asks for the short configuration. */
export function smokeRun(env: NodeJS.ProcessEnv = process.env): boolean {
  return /^(1|true|yes|on)$/i.test(env.ART_SMOKE ?? "");
}

/**
 * Resolves parameters: `defaults`, then `smoke` values when `ART_SMOKE=1`, then `ART_<NAME>`
 * environment variables (parsed as the default's type). Shows a table of the values and where
 * each came from unless `show` is false.
 *
 * ```ts
 * const P = notebookParams({ baseModel: "builtin:tiny", steps: 120 }, { smoke: { steps: 3 } });
 * ```
 */
export function notebookParams<T extends Record<string, ParamValue>>(defaults: T,
  options: { smoke?: Partial<T>; env?: NodeJS.ProcessEnv; show?: boolean } = {}): T & {
  /** True when `ART_SMOKE=1` chose the short run's values. */
  smoke: boolean;
  /** When the parameters were resolved (ms since the epoch): the start of the run, for its wall time. */
  startedAt: number;
} {
  const env = options.env ?? process.env;
  const smoke = smokeRun(env);
  const values: Record<string, ParamValue> = {};
  const rows: Array<Record<string, unknown>> = [];
  for (const [key, fallback] of Object.entries(defaults)) {
    const variable = envName(key);
    let value: ParamValue = fallback;
    let source = "default";
    const smokeValue = options.smoke?.[key as keyof T];
    if (smoke && smokeValue !== undefined) [value, source] = [smokeValue as ParamValue, "ART_SMOKE"];
    const raw = env[variable];
    if (raw !== undefined) [value, source] = [parseAs(fallback, raw, variable), variable];
    values[key] = value;
    rows.push({ parameter: key, value, from: source, variable });
  }
  // An ART_ variable that no parameter reads was most likely meant for one (ART_STEPS where the
  // notebook's parameter is rlSteps): say so, rather than run with the default in silence. Every
  // run of the cell says it again (a re-run replaces the cell's outputs).
  const variables = new Map(Object.keys(defaults).map((key) => [envName(key), key]));
  for (const name of Object.keys(env).filter((n) => n.startsWith("ART_")).sort()) {
    if (variables.has(name) || PROJECT_VARIABLES.has(name)) continue;
    const close = nearestName(name, variables.keys());
    notice(`${name} is set, but no parameter of this notebook reads it` +
      (close ? `: did you mean ${close} (${variables.get(close)})?` : ` (its parameters are in the table below)`), { seen: new Set() });
  }
  if (options.show ?? true) showTable(rows, { digits: "exact" });
  return { ...(values as T), smoke, startedAt: Date.now() };
}
