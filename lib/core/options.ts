/**
 * Checking the options a public call is given: one zod schema per call, and one error for every
 * way an options object can be wrong (an unknown name, a wrong type, a number out of range), a
 * {@link ConfigurationError} that names the call, the option and, for an unknown name, the
 * nearest valid one. A typo never passes silently and a raw ZodError never reaches the user.
 * @module
 */
import { z } from "zod";
import { ConfigurationError } from "./errors";

/** `learning_rate` -> `learningRate`. */
export function camelCase(name: string): string {
  return name.replace(/[_-]+([a-zA-Z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** `learningRate` -> `learning_rate`. */
export function snakeCase(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();
}

/** Edit distance between two strings (insertions, deletions, substitutions). */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The known name closest to `name`, or undefined when none is close enough to be a likely typo. One
 * rule for option names and environment variables alike: names are compared with case, `_` and `-`
 * ignored (`learning_rate` is `learningRate`, `ART_LEARNIGN_RATE` is near `ART_LEARNING_RATE`),
 * then by edit distance; a name inside another (`ART_STEPS` in `ART_RL_STEPS`) also counts as near.
 */
export function nearestName(name: string, known: Iterable<string>): string | undefined {
  const plain = (s: string) => s.toLowerCase().replace(/[_-]/g, "");
  const wanted = plain(name);
  let best: { name: string; distance: number } | undefined;
  for (const candidate of known) {
    const other = plain(candidate);
    if (other === wanted) return candidate;
    const distance = editDistance(wanted, other);
    const near = distance <= Math.max(2, Math.floor(other.length / 3)) || inside(wanted, other);
    if (near && (!best || distance < best.distance)) best = { name: candidate, distance };
  }
  return best?.name;
}

/** One name inside the other (4 letters at least), a shared `ART_` prefix aside: `ART_STEPS` in `ART_RL_STEPS`. */
function inside(a: string, b: string): boolean {
  const [x, y] = a.startsWith("art") && b.startsWith("art") ? [a.slice(3), b.slice(3)] : [a, b];
  const [short, long] = x.length <= y.length ? [x, y] : [y, x];
  return short.length >= 4 && long.includes(short);
}

/** An http(s) URL option. */
export const httpUrlOption = z.string().regex(/^https?:\/\/[^\s/]+\S*$/, "must be an http(s) URL");

/** A name that becomes part of paths and model names: 1-64 letters, digits, `.`, `_`, `-`. */
export const safeNameOption = z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "must be 1-64 letters, digits, '.', '_' or '-'");

/**
 * A function-valued option.
 * @typeParam F - the function's type, kept for the option's type
 */
export function functionOption<F extends (...args: never[]) => unknown>() {
  return z.custom<F>((value) => typeof value === "function", { message: "must be a function" });
}

function describe(value: unknown): string {
  if (typeof value === "function") return "a function";
  if (typeof value === "string") return JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value);
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return "an object";
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let value = root;
  for (const key of path) value = (value as Record<PropertyKey, unknown> | undefined)?.[key];
  return value;
}

/** The shape of the object schema at `path` (to name the valid keys there). */
function shapeAt(schema: z.ZodType, path: readonly PropertyKey[]): string[] {
  let current: z.ZodType | undefined = schema;
  for (const key of path) {
    if (!current) return [];
    current = unwrap(current);
    current = current instanceof z.ZodObject ? (current.shape as Record<string, z.ZodType>)[String(key)] : undefined;
  }
  if (!current) return [];
  current = unwrap(current);
  return current instanceof z.ZodObject ? Object.keys(current.shape) : [];
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current = schema;
  while (current instanceof z.ZodOptional || current instanceof z.ZodDefault || current instanceof z.ZodNullable) {
    current = current.unwrap() as z.ZodType;
  }
  return current;
}

/** One line for one zod issue, in the words of an options object. */
function issueLine(issue: z.core.$ZodIssue, input: unknown, schema: z.ZodType): string {
  const where = issue.path.map(String).join(".");
  const option = where ? `option \`${where}\`` : "the options";
  const got = `(got ${describe(valueAt(input, issue.path))})`;
  switch (issue.code) {
    case "unrecognized_keys": {
      const known = shapeAt(schema, issue.path);
      return issue.keys.map((key) => {
        const name = where ? `${where}.${key}` : key;
        const nearest = nearestName(key, known);
        return `unknown option \`${name}\`${nearest ? `; did you mean \`${nearest}\`?` : ""} (valid: ${known.join(", ")})`;
      }).join("; ");
    }
    case "too_small":
      if (issue.origin === "string") return `${option} ${issue.minimum === 1 ? "must not be empty" : `must have at least ${String(issue.minimum)} characters`} ${got}`;
      return `${option} must be ${issue.inclusive ? ">=" : ">"} ${String(issue.minimum)}${issue.origin === "array" ? " items" : ""} ${got}`;
    case "too_big":
      return `${option} must be ${issue.inclusive ? "<=" : "<"} ${String(issue.maximum)}${issue.origin === "array" ? " items" : ""} ${got}`;
    case "invalid_type": {
      const value = valueAt(input, issue.path);
      if (issue.expected === "number" && typeof value === "number") return `${option} must be a finite number ${got}`;
      return `${option} must be ${issue.expected === "int" ? "an integer" : `a ${issue.expected}`} ${got}`;
    }
    case "invalid_value":
      return `${option} must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")} ${got}`;
    case "invalid_format":
      return issue.format === "regex" && !issue.message.startsWith("Invalid") ? `${option} ${issue.message} ${got}` : `${option} must be a valid ${issue.format} ${got}`;
    case "custom":
      return `${option} ${issue.message} ${got}`;
    default:
      return `${option}: ${issue.message} ${got}`;
  }
}

/**
 * Parses the options of `call` (e.g. `"model.train"`) with `schema`; anything wrong becomes one
 * {@link ConfigurationError} that lists every problem.
 */
export function parseOptions<S extends z.ZodType>(call: string, schema: S, input: unknown): z.output<S> {
  if (input !== undefined && (input === null || typeof input !== "object" || Array.isArray(input))) {
    throw new ConfigurationError(`${call}: options must be an object (got ${describe(input)})`);
  }
  const parsed = schema.safeParse(input ?? {});
  if (parsed.success) return parsed.data;
  const lines = [...new Set(parsed.error.issues.map((issue) => issueLine(issue, input ?? {}, schema)))];
  throw new ConfigurationError(`${call}: ${lines.join("; ")}`);
}
