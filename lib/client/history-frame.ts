/**
 * Training history as a table: rows of metrics per step and split, as a danfo DataFrame.
 * @module
 */
import { MissingDependencyError } from "../core/errors";
import type { HistoryRow } from "../core/results";
import { showsAs } from "../display/output";
import { tableBundle, type TableInput } from "../display/table";

/** The columns of a history table and its rows as records. */
export interface HistoryColumns {
  /** `step`, `split`, then every metric that is a number or a boolean in some row. */
  columns: string[];
  /** One record per row; a metric missing from a row is NaN, booleans become 0 or 1. */
  records: Array<Record<string, number | string>>;
}

/** The history rows as numeric columns (what {@link historyFrame} puts in its DataFrame). */
export function historyColumns(rows: HistoryRow[]): HistoryColumns {
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

/**
 * A danfo DataFrame, typed by the members used most. danfojs-node is an optional peer, so the
 * package's declarations do not name its types; with it installed, cast to its `DataFrame` for the rest.
 */
export interface HistoryFrame {
  /** Column names: `step`, `split`, then one per metric. */
  readonly columns: string[];
  /** The rows, each an array in column order. */
  readonly values: unknown[];
  /** `[rows, columns]`. */
  readonly shape: number[];
  /** Prints the frame as a table. */
  print(): void;
  /** The first `rows` rows (default 5). */
  head(rows?: number): HistoryFrame;
  /** The last `rows` rows (default 5). */
  tail(rows?: number): HistoryFrame;
}

/** The rows as a danfo DataFrame (step, split, one column per metric). Needs the optional danfojs-node. */
export async function historyFrame(rows: HistoryRow[]): Promise<HistoryFrame> {
  let dfd: { DataFrame: new (data: unknown, options: { columns: string[] }) => HistoryFrame };
  try {
    dfd = (await import("danfojs-node")) as unknown as typeof dfd;
  } catch (error) {
    throw new MissingDependencyError("DataFrames need the optional package danfojs-node: `npm install danfojs-node` " +
      "(or read plain rows with model.historyRows())", { cause: error });
  }
  const { columns, records } = historyColumns(rows);
  const frame = new dfd.DataFrame(records, { columns });
  // A danfo frame as a cell's value (this one, or any made after) shows as the project's table.
  showsAs({ prototype: Object.getPrototypeOf(frame) as TableInput }, (f) => tableBundle(f));
  return frame;
}
