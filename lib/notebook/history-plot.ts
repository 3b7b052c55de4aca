/**
 * The reward curve (or any metric) of a training history, drawn inline with plotly.
 * @module
 */
import type { HistoryRow } from "../core/results";
import type { DisplayHandle } from "../display/output";
import { chartValue, drawnChartValue, type PlotlyFigure, showPlotly } from "../display/plotly";

/** A history in any of the shapes this library hands out. */
export type HistoryInput = HistoryRow[] | {
  /** Column names (a danfo DataFrame's). */
  columns: string[];
  /** Rows, each an array in column order. */
  values: unknown[];
};

function asRows(history: HistoryInput): Array<Record<string, unknown>> {
  if (Array.isArray(history)) return history;
  const frame = history as { columns: string[]; values: unknown[][] };
  return frame.values.map((row) => Object.fromEntries(frame.columns.map((c, i) => [c, row[i]])));
}

/** Options of {@link plotHistory} and {@link historyFigure}. */
export interface PlotHistoryOptions {
  /** A chart to redraw in place (e.g. one per training cell). */
  chart?: DisplayHandle;
  /** Redrawn while a cell runs (see `showPlotly`); end with a call without it. */
  live?: boolean;
  /** Weight of the exponential moving average drawn over noisy splits, 0-1 (default 0.6; 0 turns it off). */
  smoothing?: number;
  /** The chart's title. */
  title?: string;
  /** A line of small print under the title (e.g. what each split measures). */
  caption?: string;
  /** Vertical lines at steps, each labelled (e.g. where a re-run of the training cell began). */
  marks?: ChartMark[];
}

/** A labelled vertical line on a chart's step axis. */
export interface ChartMark {
  /** Where the dashed line goes. */
  step: number;
  /** Its label (e.g. `run from step 8 (14:02)`). */
  label: string;
}

/**
 * An exponential moving average with TensorBoard's bias correction, so the first points are not
 * pulled toward 0: `weight` 0 returns the values, 0.9 smooths a lot.
 */
export function smooth(values: number[], weight = 0.6): number[] {
  let average = 0;
  return values.map((value, i) => {
    average = average * weight + (1 - weight) * value;
    return weight > 0 ? average / (1 - weight ** (i + 1)) : value;
  });
}

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const PANEL_GAP = 0.07;

/** A split that is measured now and then (validation), drawn as markers rather than a noisy line. */
function isEvaluationSplit(split: string): boolean {
  return /(^|[^a-z])(val|eval|test)([^a-z]|$)/i.test(split);
}

/** `text` in lines of at most `width` characters, broken between words. */
function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(/\s+/).filter(Boolean)) {
    const last = lines[lines.length - 1];
    if (last !== undefined && last.length + 1 + word.length <= width) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

/**
 * The figure {@link plotHistory} draws: one panel per metric, stacked, sharing the step axis (so
 * no two y-axes sit on the same edge); each training split as its per-step line with a smoothed
 * line over it, each evaluation split (`val`) as markers. Every trace's `meta` names its split,
 * metric and whether it is the smoothed line.
 */
export function historyFigure(history: HistoryInput, metrics: string[] = ["reward"], options: PlotHistoryOptions = {}): PlotlyFigure {
  const rows = asRows(history);
  // Training splits first, so they keep the first colour whichever split logged first.
  const splits = [...new Set(rows.map((r) => String(r.split)))].sort((a, b) => Number(isEvaluationSplit(a)) - Number(isEvaluationSplit(b)));
  const steps = rows.map((r) => Number(r.step)).filter(Number.isFinite);
  const firstStep = Math.min(0, ...steps);
  const lastStep = Math.max(0, ...steps);
  const weight = options.smoothing ?? 0.6;
  const caption = options.caption ? wrapWords(options.caption, 80) : [];
  const panels = Math.max(1, metrics.length);
  const panelHeight = (1 - PANEL_GAP * (panels - 1)) / panels;
  const data: PlotlyFigure["data"] = [];
  const layout: Record<string, unknown> = {
    // The title (and the caption's lines under it) at the top; the legend's row below them.
    title: { text: options.title ?? (metrics.length === 1 ? `${metrics[0]} per step` : "metrics per step"), x: 0.01, xanchor: "left",
      y: 1, yref: "container", yanchor: "top", pad: { t: 10 },
      ...(caption.length ? { subtitle: { text: caption.join("<br>"), font: { size: 11 } } } : {}) },
    height: 320 + 190 * (panels - 1),
    margin: { t: 70 + 15 * caption.length, b: 50, l: 70, r: 20 },
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom" },
    hovermode: "x unified",
    // Steps are whole numbers: a tick per step on short runs, plotly's round numbers on long ones.
    // Half a step of room at both ends, so the markers at the first and last step are not cut.
    xaxis: { title: { text: "step" }, zeroline: false, anchor: panels === 1 ? "y" : `y${panels}`, range: [firstStep - 0.5, Math.max(lastStep, firstStep + 1) + 0.5],
      ...(lastStep - firstStep <= 20 ? { dtick: 1 } : {}) },
    shapes: (options.marks ?? []).map((m) => ({ type: "line", xref: "x", yref: "paper", x0: m.step, x1: m.step, y0: 0, y1: 1,
      line: { color: "#888", width: 1, dash: "dash" } })),
    // Inside the plot's top edge, so a mark near the right end cannot run into the legend.
    annotations: (options.marks ?? []).map((m) => ({ x: m.step, xref: "x", y: 1, yref: "paper", yanchor: "top", xanchor: "left",
      text: m.label, showarrow: false, font: { size: 10, color: "#666" }, bgcolor: "rgba(255,255,255,0.7)" })),
  };
  metrics.forEach((metric, k) => {
    const axis = k === 0 ? "y" : `y${k + 1}`;
    const top = 1 - k * (panelHeight + PANEL_GAP);
    layout[k === 0 ? "yaxis" : `yaxis${k + 1}`] = {
      title: { text: metric }, domain: [Math.max(0, top - panelHeight), top], anchor: "x", automargin: true,
    };
    splits.forEach((split, s) => {
      const points = rows.filter((r) => String(r.split) === split && typeof r[metric] === "number" && Number.isFinite(r[metric] as number))
        .sort((a, b) => Number(a.step) - Number(b.step));
      if (!points.length) return;
      const x = points.map((p) => Number(p.step));
      const y = points.map((p) => p[metric] as number);
      const color = PALETTE[s % PALETTE.length];
      const common = { type: "scatter", xaxis: "x", yaxis: axis, legendgroup: split, showlegend: k === 0 };
      const hover = (label: string) => `${label}: %{y:.3f}<extra></extra>`;
      if (isEvaluationSplit(split)) {
        data.push({ ...common, name: split, mode: "lines+markers", x, y, line: { color, width: 1.5, dash: "dot" },
          marker: { color, size: 9, symbol: "diamond" }, hovertemplate: hover(`${split}/${metric}`), meta: { split, metric, smoothed: false } });
        return;
      }
      // The per-step line keeps its name from the first point; the smoothed one joins at the third.
      const smoothed = weight > 0 && points.length >= 3;
      data.push({ ...common, name: `${split} (per step)`, mode: "lines+markers", x, y,
        line: { color, width: smoothed ? 1 : 2 }, marker: { color, size: smoothed ? 4 : 6 }, opacity: smoothed ? 0.4 : 1,
        hovertemplate: hover(`${split}/${metric}`), meta: { split, metric, smoothed: false } });
      if (smoothed) {
        data.push({ ...common, name: `${split} (smoothed)`, mode: "lines", x, y: smooth(y, weight), line: { color, width: 3 },
          hovertemplate: hover(`${split}/${metric} smoothed`), meta: { split, metric, smoothed: true } });
      }
    });
  });
  return chartValue({ data, layout }); // as a cell's value, the chart itself
}

/**
 * Draws each metric (default `reward`) against the step inline, one stacked panel per metric
 * (see {@link historyFigure}). Returns the figure.
 */
export function plotHistory(history: HistoryInput, metrics: string[] = ["reward"], options: PlotHistoryOptions = {}): PlotlyFigure {
  const figure = historyFigure(history, metrics, options);
  showPlotly(figure, options.chart, { live: options.live });
  return drawnChartValue({ ...figure }); // drawn once: as a cell's value it is one line, not a second chart
}
