/**
 * Tables: records or a danfo DataFrame as an HTML table in a notebook, aligned text elsewhere.
 * @module
 */
import { displayBundle, escapeHtml, type MimeBundle } from "./output";

/** Rows of a table: plain objects, or anything with danfo's `columns` and `values`. */
export type TableInput = ReadonlyArray<Record<string, unknown>> | {
  /** Column names. */
  columns: string[];
  /** Rows, each an array in column order. */
  values: unknown[];
};

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

/** A table's output: its HTML and its aligned text. */
export function tableBundle(input: TableInput, options: { maxRows?: number; digits?: TableDigits } = {}): MimeBundle {
  return { "text/html": tableHtml(input, options), "text/plain": tableText(input, options) };
}

/** Shows a table (records or a danfo DataFrame) as HTML in a notebook, aligned text elsewhere. */
export function showTable(input: TableInput, options: { maxRows?: number; digits?: TableDigits } = {}): void {
  displayBundle(tableBundle(input, options));
}
