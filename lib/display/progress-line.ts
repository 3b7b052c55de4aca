/**
 * A progress line that updates in place, in a notebook output or a terminal line.
 * @module
 */
import { DisplayHandle, escapeHtml, inNotebook } from "./output";

/** Where a progress line writes: a notebook display, a terminal (rewritten with \r), or a log. */
export type ProgressMode = "notebook" | "tty" | "log";

/** What a progress line shows: a count with an optional total, and free text after it. */
export interface ProgressState {
  /** How many are done. */
  done: number;
  /** How many in all; with it the line draws a bar and a percentage. */
  total?: number;
  /** Text after the count (e.g. the running mean reward). */
  detail?: string;
}

/** Renders `label [#####-----] 5/10 50% detail`. */
export function formatProgress(label: string, state: ProgressState, width = 20): string {
  const parts = [label];
  if (state.total !== undefined && state.total > 0) {
    const fraction = Math.min(1, Math.max(0, state.done / state.total));
    const filled = Math.round(fraction * width);
    parts.push(`[${"#".repeat(filled)}${"-".repeat(width - filled)}]`, `${state.done}/${state.total}`, `${Math.round(fraction * 100)}%`);
  } else {
    parts.push(String(state.done));
  }
  if (state.detail) parts.push(state.detail);
  return parts.join(" ");
}

/**
 * One line of progress that updates in place: a single notebook output replaced on each update,
 * or a terminal line rewritten with a carriage return. When stdout is not a terminal (CI logs) it
 * prints at most one line per `logIntervalMs` and always the final one.
 */
export class ProgressLine {
  /** Where it writes, chosen at construction unless `options.mode` says. */
  readonly mode: ProgressMode;
  private readonly handle = new DisplayHandle();
  private lastDraw = 0;
  private lastText = "";
  private finished = false;

  constructor(
    /** The text before the count. */
    readonly label: string,
    private readonly options: { minIntervalMs?: number; logIntervalMs?: number; mode?: ProgressMode } = {},
  ) {
    this.mode = options.mode ?? (inNotebook() ? "notebook" : process.stdout.isTTY ? "tty" : "log");
  }

  /** Updates the line; redraws are throttled, so call it as often as you like. */
  update(state: ProgressState): void {
    this.draw(formatProgress(this.label, state), false);
  }

  /** Draws the final state and ends the line. */
  finish(state: ProgressState): void {
    if (this.finished) return;
    this.draw(formatProgress(this.label, state), true);
    this.finished = true;
  }

  private draw(text: string, final: boolean): void {
    const now = Date.now();
    const interval = this.mode === "log" ? (this.options.logIntervalMs ?? 5000) : (this.options.minIntervalMs ?? 100);
    if (!final && (text === this.lastText || now - this.lastDraw < interval)) return;
    this.lastDraw = now;
    this.lastText = text;
    if (this.mode === "notebook") {
      const shown = this.handle.show({
        "text/plain": text,
        "text/html": `<pre class="art-progress" style="margin:0">${escapeHtml(text)}</pre>`,
      });
      if (shown) return;
    }
    if (this.mode === "tty") {
      process.stdout.write(`\r\x1b[2K${text}${final ? "\n" : ""}`);
    } else {
      process.stdout.write(`${text}\n`);
    }
  }
}
