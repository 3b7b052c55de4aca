/**
 * Notices: advice that is not an error (flat reward groups, a server warning). In a notebook each
 * renders as one short styled note, not a red stderr box that reads like a failure; in a terminal
 * it is one `[art]` line on stderr. A notice with a `key` is shown once per key per `seen` set.
 * @module
 */
import { displayBundle, escapeHtml, inNotebook } from "./output";

/** How a notice looks: advice (amber) or information (blue). */
export type NoticeLevel = "warning" | "info";

const COLORS: Record<NoticeLevel, { border: string; background: string; icon: string }> = {
  warning: { border: "#d9a400", background: "rgba(255, 214, 0, 0.12)", icon: "⚠" },
  info: { border: "#3b82f6", background: "rgba(59, 130, 246, 0.10)", icon: "ℹ" },
};

/** The HTML of a note: a left-bordered box, in the page's own font. */
export function noticeHtml(message: string, level: NoticeLevel = "warning"): string {
  const c = COLORS[level];
  return `<div class="art-notice art-notice-${level}" style="border-left:4px solid ${c.border};background:${c.background};` +
    `padding:6px 10px;margin:2px 0;border-radius:2px;font-family:var(--jp-ui-font-family, sans-serif);font-size:13px;` +
    `line-height:1.4;color:var(--jp-ui-font-color1, inherit)">${c.icon} ${escapeHtml(message)}</div>`;
}

/**
 * Shows `message` once per `key` in `seen` (pass a set owned by, e.g., a model, so a new model
 * starts afresh). Returns false when the key was seen before.
 */
export function notice(message: string, options: { key?: string; seen?: Set<string>; level?: NoticeLevel } = {}): boolean {
  const key = options.key ?? message;
  const seen = options.seen ?? globalSeen;
  if (seen.has(key)) return false;
  seen.add(key);
  if (inNotebook()) {
    displayBundle({ "text/html": noticeHtml(message, options.level), "text/plain": `[art] ${message}` });
  } else {
    console.warn(`[art] ${message}`);
  }
  return true;
}

const globalSeen = new Set<string>();
