/**
 * Evaluation: run a fixed set of scenarios, summarise reward and every metric, and compare
 * policies (the untrained model, a scripted baseline, the trained model) in one table.
 * @module
 */
import { gatherTrajectories } from "../client/gather";
import type { Trajectory, TrajectorySource } from "../core/trajectory";
import { showTable } from "../display/table";
import { DEFAULT_CONCURRENCY } from "../client/rollout-runner";

/** Mean reward and the mean of every numeric or boolean metric over some trajectories. */
export interface EvalSummary {
  /** Whose results these are (e.g. `untrained`, `random player`). */
  label: string;
  /** Trajectories summarised. */
  trajectories: number;
  /** Their mean reward. */
  reward: number;
  /** The mean of each of their metrics (booleans as rates). */
  [metric: string]: number | string;
}

/** Summarises finished trajectories (booleans count as 0/1, so `win` becomes a win rate). */
export function summarize(label: string, trajectories: readonly Trajectory[]): EvalSummary {
  const sums = new Map<string, { total: number; count: number }>();
  const add = (key: string, value: number) => {
    const entry = sums.get(key) ?? { total: 0, count: 0 };
    entry.total += value;
    entry.count += 1;
    sums.set(key, entry);
  };
  for (const t of trajectories) {
    add("reward", t.reward);
    for (const [key, value] of Object.entries(t.metrics)) {
      const number = typeof value === "boolean" ? Number(value) : value;
      if (Number.isFinite(number)) add(key, number);
    }
  }
  const summary: EvalSummary = { label, trajectories: trajectories.length, reward: Number.NaN };
  for (const [key, { total, count }] of sums) summary[key] = total / count;
  return summary;
}

/** What {@link evaluate} returns: the summary, and the trajectories behind it. */
export type EvalResult = EvalSummary & {
  /** The trajectories, in the order of the scenarios. */
  results: Trajectory[];
};

/** Runs every scenario (functions returning a trajectory) and summarises them under `label`. */
export async function evaluate(label: string, scenarios: Iterable<TrajectorySource>,
  options: { concurrency?: number; progress?: boolean } = {}): Promise<EvalResult> {
  const results = await gatherTrajectories(scenarios, { concurrency: options.concurrency ?? DEFAULT_CONCURRENCY, progress: options.progress === false ? false : `eval ${label}` });
  return Object.assign(summarize(label, results), { results });
}

/** Shows summaries side by side: one row per policy, the chosen columns (default: all). */
export function showComparison(summaries: readonly EvalSummary[], columns?: string[]): void {
  const keys = columns ?? [...new Set(summaries.flatMap((s) => Object.keys(s)))].filter((k) => k !== "results");
  showTable(summaries.map((s) => Object.fromEntries(["label", ...keys.filter((k) => k !== "label")].map((k) => [k, s[k]]))));
}
