/**
 * Early stopping's pick: the step whose validation scored highest, read from the training history.
 * @module
 */
import { z } from "zod";
import { parseOptions } from "../core/options";
import type { HistoryRow } from "../core/results";

/** `split/metric`, as `bestStep` and `model.deleteCheckpoints({ keepBestBy })` take it. */
export const SplitMetricSchema = z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_./-]+$/, "must be `split/metric`, e.g. `val/reward`");

const BestStepArgsSchema = z.object({ by: SplitMetricSchema }).strict();

/** `val/win` -> `["val", "win"]`: the split is up to the first `/`, the metric the rest (it may hold `/`), as the server reads it. */
export function splitMetric(by: string): [split: string, metric: string] {
  const at = by.indexOf("/");
  return [by.slice(0, at), by.slice(at + 1)];
}

/** The step {@link bestStep} picked, and its score. */
export interface BestStep {
  /** The step (the checkpoint `name@step`) whose row scored highest. */
  step: number;
  /** Its score: the row's metric. */
  value: number;
}

/**
 * The step whose `split/metric` row is highest (the earliest of equal ones; booleans count as
 * 0 or 1), or undefined when no row has that metric: the same pick as the server's
 * `model.deleteCheckpoints({ keepBestBy })`, without deleting anything. Evaluate it with
 * `model.atStep(best.step, ...)`. Pick by a validation split that is not the final evaluation's
 * scenarios, or the final score is a maximum over noisy measurements, not an estimate.
 */
export function bestStep(rows: readonly HistoryRow[], by = "val/reward"): BestStep | undefined {
  parseOptions("bestStep", BestStepArgsSchema, { by });
  const [split, metric] = splitMetric(by);
  let best: BestStep | undefined;
  for (const row of rows) {
    if (row.split !== split) continue;
    const raw = row[metric];
    const value = typeof raw === "boolean" ? Number(raw) : raw;
    if (typeof value !== "number" || !Number.isFinite(value)) continue;
    if (!best || value > best.value) best = { step: row.step, value };
  }
  return best;
}
