/**
 * Plotly charts in a notebook: the figure's JSON bundle for JupyterLab's renderer and an HTML form
 * that loads plotly.js from the Jupyter server; a one-line description outside a notebook.
 * @module
 */
import fs from "node:fs";
import { MissingDependencyError } from "../core/errors";
import { DisplayHandle, escapeHtml, inNotebook, type MimeBundle, withRichView } from "./output";

/** A plotly figure: traces, layout and config exactly as plotly.js takes them. */
export interface PlotlyFigure {
  /** The traces. */
  data: Array<Record<string, unknown>>;
  /** Titles, axes, size, legend. */
  layout?: Record<string, unknown>;
  /** Plotly's display options (`responsive` is on by default). */
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
  if (!inNotebook()) {
    if (!options.live) console.log(plotlyText(figure));
    return;
  }
  const divId = `${handle.id}-${Date.now().toString(36)}`;
  handle.show(options.live ? { "text/html": plotlyHtml(figure, divId, false), "text/plain": plotlyText(figure) } : plotlyBundle(figure, divId));
}

/** A figure's output: the plotly bundle JupyterLab renders, its HTML form and its one-line text. */
function plotlyBundle(figure: PlotlyFigure, divId: string): MimeBundle {
  return {
    [PLOTLY_MIME]: { data: figure.data, layout: figure.layout ?? {}, config: figure.config ?? {} },
    "text/html": plotlyHtml(figure, divId, false),
    "text/plain": plotlyText(figure),
  };
}

let figureCounter = 0;

/** The figure, drawn as the chart when it is a cell's value (its Out[n]). */
export function chartValue<T extends PlotlyFigure>(figure: T): T {
  return withRichView(figure, (f) => plotlyBundle(f, `art-figure-${process.pid}-${Date.now().toString(36)}-${++figureCounter}`));
}

/** The figure, shown as its one-line description when it is a cell's value (for a figure already drawn). */
export function drawnChartValue<T extends PlotlyFigure>(figure: T): T {
  return withRichView(figure, (f) => ({ "text/plain": plotlyText(f) }));
}
