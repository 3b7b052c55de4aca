/**
 * The training loop every cookbook notebook runs: gather groups of rollouts, train one GRPO step
 * on them, evaluate now and then, and redraw the reward curve in place.
 * @module
 */
import { z } from "zod";
import { type GatherProgress, gatherTrajectoryGroups } from "../client/gather";
import { checkTrainOptions, TrainableModel, type TrainOptions } from "../client/model";
import { functionOption, parseOptions } from "../core/options";
import type { HistoryRow } from "../core/results";
import type { TrajectoryGroup } from "../core/trajectory";
import { DisplayHandle } from "../display/output";
import { ProgressLine } from "../display/progress-line";
import { summarize } from "./evaluate";
import { type ChartMark, plotHistory } from "./history-plot";

/** Options of {@link trainLoop}. */
export interface TrainLoopOptions {
  /** The model to train (registered). */
  model: TrainableModel;
  /** Training steps to run (from the model's current step). */
  steps: number;
  /** The groups of one step: each group's rollouts share a scenario, so GRPO can compare them. */
  groups: (step: number) => TrajectoryGroup[];
  /** GRPO settings (learning rate, ...) passed to `model.train`. */
  train?: Omit<TrainOptions, "progress">;
  /** Every `every` steps (and after the last), run `groups()` and log them as split `val`. */
  evaluate?: {
    /** Evaluate every this many steps. */
    every: number;
    /** The evaluation's groups (the same scenarios each time, for a fair curve). */
    groups: () => TrajectoryGroup[];
  };
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

/** What a loop did: the history rows at its end, wall time, the chart it drew and the re-runs marked on it. */
export interface TrainLoopResult {
  /** The model's history rows at the end (this run's and earlier ones). */
  history: HistoryRow[];
  /** Wall time of this run. */
  seconds: number;
  /** The chart it drew (pass it to redraw the same output). */
  chart: DisplayHandle;
  /** Where each later run of this model's loop began in this process (dashed lines on the chart). */
  marks: ChartMark[];
}

// Where each run of a model's training cell began in this kernel; every run after the first is
// drawn as a mark on its chart, so a reward edit and re-run shows where the curve's rules changed.
const runStarts = new Map<string, Array<{ step: number; at: Date }>>();

function runMarks(model: TrainableModel, first: number): ChartMark[] {
  const key = `${model.project}/${model.name}`;
  // A model at step 0 is a fresh run (e.g. the server cell re-run): the marks of an earlier one go.
  const starts = first === 0 ? [] : runStarts.get(key) ?? [];
  if (!starts.some((s) => s.step === first)) starts.push({ step: first, at: new Date() });
  runStarts.set(key, starts);
  const time = (d: Date) => `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
  // The first run in this process is where the curve (as far as this kernel knows) begins; each later one is marked.
  return starts.slice(1).map((s) => ({ step: s.step - 0.5, label: `run from step ${s.step} (${time(s.at)})` }));
}

function chartCaption(options: TrainLoopOptions): string {
  const temperature = options.train?.temperature;
  const train = `train: each step's sampled rollouts${temperature !== undefined ? ` (temperature ${temperature})` : ""}`;
  if (!options.evaluate) return train;
  return `${train} · val: the evaluation rollouts; greedy ones (temperature 0) usually score above sampled ones`;
}

/**
 * Runs `steps` GRPO steps. From the first second a progress line says what runs (evaluating,
 * gathering a step's rollouts, training on them) with counts and the time; the chart of
 * `metrics` per step (train and val) is redrawn after every step. A point at step s is the
 * rollouts sampled by the model at step s; training on them makes step s + 1.
 */
export async function trainLoop(options: TrainLoopOptions): Promise<TrainLoopResult> {
  parseOptions("trainLoop", TrainLoopOptionsSchema, options);
  checkTrainOptions("trainLoop: option `train`:", options.train);
  const { model, steps } = options;
  const chart = options.chart ?? new DisplayHandle();
  const metrics = options.metrics ?? ["reward"];
  const started = Date.now();
  const progress = new ProgressLine(`training ${model.name}`, { logIntervalMs: 10_000 });
  let completed = 0;
  let phase = "connecting";
  let last = "";
  const draw = () => {
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    progress.update({ done: completed, total: steps, detail: [phase, last, `${seconds} s`].filter(Boolean).join(" · ") });
  };
  draw();
  const ticker = setInterval(draw, 1000); // the time moves even while one request runs long
  const gathering = (what: string) => ({
    concurrency: options.concurrency ?? 64,
    progress: false as const,
    onProgress: (p: GatherProgress) => {
      phase = `${what} ${p.done}/${p.total} rollouts${p.exceptions ? ` (${p.exceptions} failed)` : ""}`;
      draw();
    },
  });
  const caption = chartCaption(options);
  let marks: ChartMark[] = [];
  const plot = (rows: HistoryRow[], live: boolean) => void plotHistory(rows, metrics, { chart, live, marks, caption });
  let history: HistoryRow[] = [];
  try {
    const first = await model.getStep();
    marks = runMarks(model, first);
    let lastVal = "";
    const runEval = async (step: number) => {
      const groups = await gatherTrajectoryGroups(options.evaluate!.groups(), gathering(`evaluating step ${step}:`));
      const row = await model.log(groups, { split: "val" });
      lastVal = `val ${Number(row.reward).toFixed(3)} at step ${step}`;
    };
    if (options.evaluate && first === 0) await runEval(0);
    // A run that continues (the cell re-run) shows its curve so far right away.
    history = await model.historyRows();
    if (history.length) plot(history, true);
    for (let i = 0; i < steps; i++) {
      const step = first + i;
      const groups = await gatherTrajectoryGroups(options.groups(step), gathering(`step ${step}: gathering`));
      const { reward } = summarize("train", groups.flatMap((g) => g.trajectories));
      const stepLine = () => `step ${step} reward ${reward.toFixed(3)}${lastVal ? ` · ${lastVal}` : ""}`;
      // A role that never got to act in a game (e.g. an operative whose spymaster broke the rules)
      // has a trajectory without sampled tokens: there is nothing to train on it, so it is left out.
      for (const group of groups) group.trajectories = group.trajectories.filter((t) => t.choices().length > 0);
      const trainable = groups.filter((g) => g.trajectories.length > 0);
      phase = `step ${step}: training`;
      draw();
      if (trainable.length) {
        await model.train(trainable, { ...options.train, progress: false, onEvent: (event) => {
          if (event.type === "progress") phase = `step ${step}: training (gradient step ${event.gradientStep}/${event.gradientSteps})`;
          options.train?.onEvent?.(event);
        } });
      }
      completed = i + 1;
      last = stepLine();
      if (options.evaluate && ((i + 1) % options.evaluate.every === 0 || i === steps - 1)) await runEval(step + 1);
      last = stepLine();
      phase = i + 1 < steps ? `step ${step + 1}: starting` : "";
      history = await model.historyRows();
      plot(history, true);
      draw();
    }
  } finally {
    clearInterval(ticker); // also when the first request fails: no line keeps ticking after the cell
    // The last drawing is a plotly bundle, which the saved notebook keeps (also after an error).
    if (history.length) plot(history, false);
  }
  const seconds = (Date.now() - started) / 1000;
  progress.finish({ done: completed, total: steps, detail: [last, `${seconds.toFixed(0)} s`].filter(Boolean).join(" · ") });
  return { history, seconds, chart, marks };
}
