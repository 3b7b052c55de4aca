/**
 * Rich output for notebook cells, with terminal fallbacks.
 *
 * Inside the project's tslab kernel these helpers send Jupyter `display_data` messages (one
 * output carrying several MIME types, updatable in place by display id). Anywhere else (a script
 * run with tsx, a test) they print readable text to stdout.
 * @module
 */
import fs from "node:fs";
import { MissingDependencyError } from "./errors";

/** The payload of a Jupyter display message: one output, several representations. */
export type MimeBundle = Record<string, unknown>;

type WriteDisplayData = (
  content: { data: MimeBundle; metadata: Record<string, unknown>; transient: { display_id?: string } },
  update: boolean,
) => void;

/** True when running inside a Jupyter kernel started by kernel/launch.cjs (or plain tslab). */
export function inNotebook(): boolean {
  return kernelWriter() !== null;
}

function kernelWriter(): WriteDisplayData | null {
  const underTslab = process.env.ART_TS_KERNEL === "1" || /tslab/.test(process.argv[1] ?? "");
  if (!underTslab) return null;
  try {
    // tslab keeps the writer of the executing cell on this module; it is null between cells.
    const jupyter = require("tslab/dist/jupyter") as { lastWriteDisplayData?: WriteDisplayData | null };
    return jupyter.lastWriteDisplayData ?? null;
  } catch {
    return null;
  }
}

let displayCounter = 0;

/** A display output that can be replaced in place (Jupyter `update_display_data`). */
export class DisplayHandle {
  /** The Jupyter display id of this output. */
  readonly id: string;
  private shown = false;

  constructor(id?: string) {
    displayCounter += 1;
    this.id = id ?? `art-${process.pid}-${Date.now().toString(36)}-${displayCounter}`;
  }

  /** Shows the bundle; the first call creates the output, later calls replace it. Returns false outside a kernel. */
  show(bundle: MimeBundle): boolean {
    const write = kernelWriter();
    if (!write) return false;
    write({ data: bundle, metadata: {}, transient: { display_id: this.id } }, this.shown);
    this.shown = true;
    return true;
  }
}

/** Shows one output with the given MIME bundle; outside a kernel prints its `text/plain` part. */
export function displayBundle(bundle: MimeBundle): void {
  if (!new DisplayHandle().show(bundle)) {
    const text = bundle["text/plain"];
    if (typeof text === "string") console.log(text);
  }
}

// ---------------------------------------------------------------------------------------------
// Plotly

/** A plotly figure: traces, layout and config exactly as plotly.js takes them. */
export interface PlotlyFigure {
  data: Array<Record<string, unknown>>;
  layout?: Record<string, unknown>;
  config?: Record<string, unknown>;
}

/** The MIME type JupyterLab renders natively when the Python `plotly` package is installed. */
export const PLOTLY_MIME = "application/vnd.plotly.v1+json";

function scriptSafe(text: string): string {
  return text.replace(/<\/script/gi, "<\\/script").replace(/<!--/g, "<\\!--");
}

/**
 * plotly.js as one inline `<script>` (~4.8 MB), for standalone pages that no Jupyter server
 * serves (an HTML export). Notebook outputs never carry it: see {@link plotlyHtml}.
 */
function plotlyLibraryScript(): string {
  let file: string;
  try {
    file = require.resolve("plotly.js-dist-min/plotly.min.js");
  } catch (error) {
    throw new MissingDependencyError("charts in a notebook need the optional package plotly.js-dist-min: " +
      "`npm install plotly.js-dist-min`, then restart the kernel", { cause: error });
  }
  const source = fs.readFileSync(file, "utf8");
  // Hide an AMD loader (classic notebook pages have require.js) so the UMD bundle sets window.Plotly.
  return `<script>(function(){var d=window.define;window.define=undefined;\n${scriptSafe(source)}\n;window.define=d;` +
    `(window.__artPlotlyQueue||[]).forEach(function(f){f();});window.__artPlotlyQueue=[];})();</script>`;
}

/** Where JupyterLab's server hands out plotly.js (set up by `npm run setup`), relative to its base URL. */
export const PLOTLY_STATIC_PATH = "static/plotly.min.js";

// Loads plotly.js into a JupyterLab page once, from the Jupyter server (the page's base URL is in
// its #jupyter-config-data), then draws every queued chart. Pages without that config (an HTML
// export, another front end) keep the note until plotly.js arrives some other way.
const LOAD_PLOTLY = `function load(){if(window.__artPlotlyLoading)return;var c=document.getElementById("jupyter-config-data");` +
  `if(!c)return;window.__artPlotlyLoading=true;var base="/";try{base=JSON.parse(c.textContent).baseUrl||"/";}catch(e){}` +
  `var s=document.createElement("script");var d=window.define;window.define=undefined;` +
  `s.src=base.replace(/\\/?$/,"/")+${JSON.stringify(PLOTLY_STATIC_PATH)};` +
  `s.onload=function(){window.define=d;var q=window.__artPlotlyQueue||[];window.__artPlotlyQueue=[];q.forEach(function(f){f();});};` +
  `s.onerror=function(){window.define=d;window.__artPlotlyLoading=false;};document.head.appendChild(s);}`;

/**
 * The `text/html` form of a figure: a div and a script that draws into it with plotly.js, loading
 * the library from the Jupyter server the first time a page needs it; with `embedLibrary`,
 * plotly.js itself (~4.8 MB) comes first (standalone pages).
 */
export function plotlyHtml(figure: PlotlyFigure, divId: string, embedLibrary: boolean): string {
  const height = typeof figure.layout?.height === "number" ? figure.layout.height : 420;
  const args = [JSON.stringify(divId), JSON.stringify(figure.data), JSON.stringify(figure.layout ?? {}),
    JSON.stringify({ responsive: true, ...(figure.config ?? {}) })].map(scriptSafe).join(",");
  // The note shows only where plotly.js never loads (a front end without the Jupyter server's
  // static files, or an untrusted page); drawing removes it.
  const draw = `<div id="${divId}" class="art-plotly" style="width:100%;height:${height}px">` +
    `<span class="art-plotly-wait" style="font-size:12px;opacity:.6">${escapeHtml(plotlyText(figure))}: plotly.js is not loaded ` +
    `in this page</span></div>` +
    `<script>(function(){function draw(){var d=document.getElementById(${JSON.stringify(divId)});if(!d)return;` +
    `var w=d.querySelector(".art-plotly-wait");if(w)w.remove();window.Plotly.newPlot(${args});}${LOAD_PLOTLY}` +
    `if(window.Plotly){draw();}else{(window.__artPlotlyQueue=window.__artPlotlyQueue||[]).push(draw);load();}})();</script>`;
  return (embedLibrary ? plotlyLibraryScript() : "") + draw;
}

/** A short text description of a figure, for terminals and text-only front ends. */
function plotlyText(figure: PlotlyFigure): string {
  const title = figure.layout?.title;
  const titleText = typeof title === "string" ? title : (title as { text?: string } | undefined)?.text;
  const traces = figure.data.map((t) => `${String(t.name ?? t.type ?? "trace")} (${Array.isArray(t.y) ? t.y.length : 0} points)`);
  return `<plotly figure${titleText ? ` "${titleText}"` : ""}: ${traces.join(", ")}>`;
}

/**
 * Shows a plotly figure inline: one output with the plotly JSON bundle (rendered natively by
 * JupyterLab) and an HTML fallback (used by nbconvert's HTML export and other front ends).
 * Pass a handle to redraw the same output in place. Outside a notebook prints a one-line description.
 *
 * `live: true` is for a chart redrawn while a cell runs (the reward curve during training):
 * JupyterLab's plotly renderer draws its first bundle and ignores updates (plotly.py issue 3053),
 * so a live redraw sends only the HTML form, which Lab renders again on every update. End a live
 * chart with one call without `live`: it becomes a plotly bundle again, which the saved notebook
 * keeps and Lab draws on reopening (when the HTML's script is no longer trusted to run).
 */
export function showPlotly(figure: PlotlyFigure, handle: DisplayHandle = new DisplayHandle(), options: { live?: boolean } = {}): void {
  const write = kernelWriter();
  if (!write) {
    if (!options.live) console.log(plotlyText(figure));
    return;
  }
  const html = plotlyHtml(figure, `${handle.id}-${Date.now().toString(36)}`, false);
  handle.show(options.live ? { "text/html": html, "text/plain": plotlyText(figure) } : {
    [PLOTLY_MIME]: { data: figure.data, layout: figure.layout ?? {}, config: figure.config ?? {} },
    "text/html": html,
    "text/plain": plotlyText(figure),
  });
}

// ---------------------------------------------------------------------------------------------
// Tables

/** Rows of a table: plain objects, or anything with danfo's `columns` and `values`. */
export type TableInput = ReadonlyArray<Record<string, unknown>> | { columns: string[]; values: unknown[] };

function toRows(input: TableInput): { columns: string[]; rows: unknown[][] } {
  if (!Array.isArray(input)) {
    const frame = input as { columns: string[]; values: unknown[] };
    const rows = frame.values.map((row) => (Array.isArray(row) ? row : [row]));
    return { columns: [...frame.columns], rows };
  }
  const records = input as ReadonlyArray<Record<string, unknown>>;
  const columns: string[] = [];
  for (const record of records) for (const key of Object.keys(record)) if (!columns.includes(key)) columns.push(key);
  return { columns, rows: records.map((record) => columns.map((c) => record[c])) };
}

/** Decimals shown for fractional numbers, or "exact" for every number as JavaScript writes it (3e-4 as 0.0003). */
export type TableDigits = number | "exact";

function cellText(value: unknown, digits: TableDigits): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "number") return Number.isInteger(value) || digits === "exact" ? String(value) : value.toFixed(digits);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Formats a table as aligned plain text (numbers right-aligned). */
export function tableText(input: TableInput, options: { maxRows?: number; digits?: TableDigits } = {}): string {
  const { columns, rows } = toRows(input);
  const digits = options.digits ?? 3;
  const shown = rows.slice(0, options.maxRows ?? 50);
  const cells = shown.map((row) => row.map((v) => cellText(v, digits)));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]?.length ?? 0)));
  const numeric = columns.map((_, i) => shown.every((r) => r[i] === undefined || r[i] === null || typeof r[i] === "number"));
  const pad = (text: string, i: number) => (numeric[i] ? text.padStart(widths[i] ?? 0) : text.padEnd(widths[i] ?? 0));
  const lines = [columns.map(pad), widths.map((w) => "-".repeat(w)), ...cells.map((r) => r.map(pad))].map((l) => l.join("  ").trimEnd());
  if (rows.length > shown.length) lines.push(`... ${rows.length - shown.length} more rows`);
  return lines.join("\n");
}

/** Formats a table as an HTML `<table>`. */
export function tableHtml(input: TableInput, options: { maxRows?: number; digits?: TableDigits } = {}): string {
  const { columns, rows } = toRows(input);
  const digits = options.digits ?? 3;
  const shown = rows.slice(0, options.maxRows ?? 50);
  const head = `<thead><tr>${columns.map((c) => `<th>${escapeHtml(c)}</th>`).join("")}</tr></thead>`;
  const body = shown.map((r) => `<tr>${r.map((v) => `<td>${escapeHtml(cellText(v, digits))}</td>`).join("")}</tr>`).join("");
  const more = rows.length > shown.length ? `<p>… ${rows.length - shown.length} more rows</p>` : "";
  return `<table class="art-table">${head}<tbody>${body}</tbody></table>${more}`;
}

/** Shows a table (records or a danfo DataFrame) as HTML in a notebook, aligned text elsewhere. */
export function showTable(input: TableInput, options: { maxRows?: number; digits?: TableDigits } = {}): void {
  displayBundle({ "text/html": tableHtml(input, options), "text/plain": tableText(input, options) });
}

// ---------------------------------------------------------------------------------------------
// Progress

/** Where a progress line writes: a notebook display, a terminal (rewritten with \r), or a log. */
export type ProgressMode = "notebook" | "tty" | "log";

/** What a progress line shows: a count with an optional total, and free text after it. */
export interface ProgressState {
  done: number;
  total?: number;
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
  readonly mode: ProgressMode;
  private readonly handle = new DisplayHandle();
  private lastDraw = 0;
  private lastText = "";
  private finished = false;

  constructor(
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
