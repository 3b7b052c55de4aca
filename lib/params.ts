/**
 * A notebook's parameters cell: defaults, a short configuration for tests (`ART_SMOKE=1`), and an
 * environment variable per parameter (`steps` -> `ART_STEPS`, `baseModel` -> `ART_BASE_MODEL`),
 * so a test or a GPU box changes a run without editing the notebook.
 * @module
 */
import { showTable } from "./display";
import { ArtError } from "./errors";

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
  options: { smoke?: Partial<T>; env?: NodeJS.ProcessEnv; show?: boolean } = {}): T & { smoke: boolean } {
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
  if (options.show ?? true) showTable(rows);
  return { ...(values as T), smoke };
}
