/**
 * Reading an agent's answer out of its reply: the text inside `<tag>...</tag>`, checked with a
 * zod schema, so an environment gets a typed move or a reason why there is none.
 * @module
 */
import type { z } from "zod";

/** A parsed answer, or why the reply has none: no tag at all, or a tag whose content is invalid. */
export type TagParse<T> =
  | {
    /** The reply held a valid answer. */
    ok: true;
    /** The answer, parsed by the schema. */
    value: T;
    /** The tag's text. */
    raw: string;
  }
  | {
    /** The reply held no valid answer. */
    ok: false;
    /** No tag at all, or a tag whose content the schema refused. */
    reason: "missing" | "invalid";
    /** The tag's text, or null when there was no tag. */
    raw: string | null;
    /** Why, in a sentence. */
    message: string;
  };

/** The trimmed text inside the first `<tag>...</tag>` of `text`, or null. */
export function extractTag(text: string, tag: string): string | null {
  const open = `<${tag}>`;
  const start = text.indexOf(open);
  if (start < 0) return null;
  const end = text.indexOf(`</${tag}>`, start + open.length);
  if (end < 0) return null;
  return text.slice(start + open.length, end).trim();
}

/**
 * Parses the first `<tag>...</tag>` of `text` with `schema`.
 *
 * ```ts
 * const move = parseTagged(reply, "move", z.enum(["left", "right", "up", "down"]));
 * if (!move.ok) trajectory.metrics.invalid = true;
 * ```
 */
export function parseTagged<S extends z.ZodType>(text: string, tag: string, schema: S): TagParse<z.infer<S>> {
  const raw = extractTag(text, tag);
  if (raw === null) return { ok: false, reason: "missing", raw, message: `no <${tag}>...</${tag}> in the reply` };
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    return { ok: false, reason: "invalid", raw, message: `<${tag}>${raw}</${tag}> is not valid: ${parsed.error.issues[0]?.message ?? "invalid"}` };
  }
  return { ok: true, value: parsed.data as z.infer<S>, raw };
}
