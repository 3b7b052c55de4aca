/**
 * The training loop every cookbook notebook runs: gather groups of rollouts, train one GRPO step
 * on them, evaluate now and then, and redraw the reward curve in place.
 * @module
 */
import { z } from "zod";
import { DisplayHandle, ProgressLine } from "./display";
import { summarize } from "./evaluate";
import { gatherTrajectoryGroups } from "./gather";
import { plotHistory } from "./history";
import { checkTrainOptions, TrainableModel, type TrainOptions } from "./model";
import { functionOption, parseOptions } from "./options";
import type { TrajectoryGroup } from "./trajectory";
import type { HistoryRow } from "./results";

/** Options of {@link trainLoop}. */
export interface TrainLoopOptions {
  model: TrainableModel;
  /** Training steps to run (from the model's current step). */
  steps: number;
  /** The groups of one step: each group's rollouts share a scenario, so GRPO can compare them. */
  groups: (step: number) => TrajectoryGroup[];
  /** GRPO settings (learning rate, ...) passed to `model.train`. */
  train?: Omit<TrainOptions, "progress">;
  /** Every `every` steps (and after the last), run `groups()` and log them as split `val`. */
  evaluate?: { every: number; groups: () => TrajectoryGroup[] };
  /** Metrics drawn on the live chart (default `["reward"]`). */
  metrics?: string[];
  /** Rollouts running at once (default 64). */
  concurrency?: number;
  /** A chart to redraw (default: a new one below the cell). */
  chart?: DisplayHandle;
}

const TrainLoopOptionsSchema = z.object({
  model: z.instanceof(TrainableModel, { message: "must be a TrainableModel" }),
  steps: z.number().int().min(0).max(1_000_000),
  groups: functionOption<(step: number) => TrajectoryGroup[]>(),
  train: z.record(z.string(), z.unknown()).optional(),
  evaluate: z.object({ every: z.number().int().min(1), groups: functionOption<() => TrajectoryGroup[]>() }).strict().optional(),
  metrics: z.array(z.string().min(1)).min(1).optional(),
  concurrency: z.number().int().min(1).max(100_000).optional(),
  chart: z.instanceof(DisplayHandle, { message: "must be a DisplayHandle" }).optional(),
}).strict();

/** What a loop did: the history rows at its end, wall time, and the chart it drew. */
export interface TrainLoopResult {
  history: HistoryRow[];
  seconds: number;
  chart: DisplayHandle;
}

/**
 * Runs `steps` GRPO steps. A progress line shows the step, its mean reward and the last
 * evaluation; the chart of `metrics` per step (train and val lines) is redrawn after every step.
 */
export async function trainLoop(options: TrainLoopOptions): Promise<TrainLoopResult> {
  parseOptions("trainLoop", TrainLoopOptionsSchema, options);
  checkTrainOptions("trainLoop: option `train`:", options.train);
  const { model, steps } = options;
  const chart = options.chart ?? new DisplayHandle();
  const metrics = options.metrics ?? ["reward"];
  const gather = { concurrency: options.concurrency ?? 64, progress: false as const };
  const progress = new ProgressLine(`training ${model.name}`, { logIntervalMs: 10_000 });
  const started = Date.now();
  const first = await model.getStep();
  let lastVal = "";
  const runEval = async () => {
    const groups = await gatherTrajectoryGroups(options.evaluate!.groups(), gather);
    const row = await model.log(groups, { split: "val" });
    lastVal = ` · val reward ${Number(row.reward).toFixed(3)}`;
  };
  let history: HistoryRow[] = [];
  try {
    if (options.evaluate && first === 0) await runEval();
    // A run that continues (the cell re-run) shows its curve so far right away.
    history = await model.historyRows();
    if (history.length) plotHistory(history, metrics, { chart, live: true });
    for (let i = 0; i < steps; i++) {
      const step = first + i;
      const groups = await gatherTrajectoryGroups(options.groups(step), gather);
      const { reward } = summarize("train", groups.flatMap((g) => g.trajectories));
      // A role that never got to act in a game (e.g. an operative whose spymaster broke the rules)
      // has a trajectory without sampled tokens: there is nothing to train on it, so it is left out.
      for (const group of groups) group.trajectories = group.trajectories.filter((t) => t.choices().length > 0);
      const trainable = groups.filter((g) => g.trajectories.length > 0);
      if (trainable.length) await model.train(trainable, { ...options.train, progress: false });
      if (options.evaluate && ((i + 1) % options.evaluate.every === 0 || i === steps - 1)) await runEval();
      history = await model.historyRows();
      plotHistory(history, metrics, { chart, live: true });
      const seconds = (Date.now() - started) / 1000;
      progress.update({ done: i + 1, total: steps, detail: `step ${step + 1} · reward ${reward.toFixed(3)}${lastVal} · ${seconds.toFixed(0)} s` });
    }
  } finally {
    // The last drawing is a plotly bundle, which the saved notebook keeps (also after an error).
    if (history.length) plotHistory(history, metrics, { chart });
  }
  const seconds = (Date.now() - started) / 1000;
  progress.finish({ done: steps, total: steps, detail: `${lastVal.slice(3)} · ${seconds.toFixed(0)} s` });
  return { history, seconds, chart };
}
