/**
 * Training history: rows of metrics per step and split, as a danfo DataFrame, and the reward
 * curve (or any metric) drawn inline with plotly.
 * @module
 */
import { type DisplayHandle, type PlotlyFigure, showPlotly } from "./display";
import type { HistoryRow } from "./wire";

/** Numeric columns only; a metric missing from a row is NaN. */
export function historyColumns(rows: HistoryRow[]): { columns: string[]; records: Array<Record<string, number | string>> } {
  const columns = ["step", "split"];
  for (const row of rows) {
    for (const [key, value] of Object.entries(row)) {
      if (!columns.includes(key) && (typeof value === "number" || typeof value === "boolean")) columns.push(key);
    }
  }
  const records = rows.map((row) => Object.fromEntries(columns.map((c) => {
    const value = row[c];
    if (c === "split") return [c, String(value)];
    return [c, typeof value === "number" ? value : typeof value === "boolean" ? Number(value) : Number.NaN];
  })));
  return { columns, records };
}

/** The rows as a danfo DataFrame (step, split, one column per metric). */
export async function historyFrame(rows: HistoryRow[]): Promise<import("danfojs-node").DataFrame> {
  const dfd = await import("danfojs-node");
  const { columns, records } = historyColumns(rows);
  return new dfd.DataFrame(records, { columns });
}

/** A history in any of the shapes this library hands out. */
export type HistoryInput = HistoryRow[] | { columns: string[]; values: unknown[] };

function asRows(history: HistoryInput): Array<Record<string, unknown>> {
  if (Array.isArray(history)) return history;
  const frame = history as { columns: string[]; values: unknown[][] };
  return frame.values.map((row) => Object.fromEntries(frame.columns.map((c, i) => [c, row[i]])));
}

/**
 * Draws each metric (default `reward`) against the step, one line per split, inline. Pass a
 * `DisplayHandle` to redraw the same chart during training. Returns the figure.
 */
export function plotHistory(history: HistoryInput, metrics: string[] = ["reward"], handle?: DisplayHandle): PlotlyFigure {
  const rows = asRows(history);
  const splits = [...new Set(rows.map((r) => String(r.split)))];
  const data: PlotlyFigure["data"] = [];
  metrics.forEach((metric, k) => {
    for (const split of splits) {
      const points = rows.filter((r) => String(r.split) === split && typeof r[metric] === "number" && Number.isFinite(r[metric] as number))
        .sort((a, b) => Number(a.step) - Number(b.step));
      if (!points.length) continue;
      data.push({
        type: "scatter", mode: "lines+markers", name: `${split}/${metric}`,
        x: points.map((p) => Number(p.step)), y: points.map((p) => p[metric] as number),
        ...(k > 0 ? { yaxis: `y${k + 1}` } : {}),
      });
    }
  });
  const layout: Record<string, unknown> = {
    title: { text: metrics.length === 1 ? `${metrics[0]} per step` : "metrics per step" },
    xaxis: { title: { text: "step" } },
    yaxis: { title: { text: metrics[0] } },
    legend: { orientation: "h" },
  };
  metrics.slice(1).forEach((metric, i) => {
    layout[`yaxis${i + 2}`] = { title: { text: metric }, overlaying: "y", side: "right" };
  });
  const figure: PlotlyFigure = { data, layout };
  showPlotly(figure, handle);
  return figure;
}
