/**
 * The training loop every cookbook notebook runs: gather groups of rollouts, train one GRPO step
 * on them, evaluate now and then, and redraw the reward curve in place.
 * @module
 */
import { z } from "zod";
import { checkTrainOptions, TrainableModel } from "../client/model";
import { type PipelineOptions, type PipelineResult, type PipelineState, trainPipeline } from "../client/pipeline";
import { StoppedError } from "../core/errors";
import { functionOption, parseOptions } from "../core/options";
import type { HistoryRow } from "../core/results";
import type { TrajectoryGroup } from "../core/trajectory";
import { DisplayHandle } from "../display/output";
import { ProgressLine } from "../display/progress-line";
import { type ChartMark, plotHistory } from "./history-plot";
import { DEFAULT_CONCURRENCY } from "../client/rollout-runner";

/** Options of {@link trainLoop}. */
export interface TrainLoopOptions {
  /** The model to train (registered). */
  model: TrainableModel;
  /** Training steps to run (from the model's current step). */
  steps: number;
  /** The groups of one step: each group's rollouts share a scenario, so GRPO can compare them. */
  groups: (step: number) => TrajectoryGroup[];
  /** GRPO settings (learning rate, ...) passed to `model.train`. */
  train?: PipelineOptions["train"];
  /** Every `every` steps (and after the last), run `groups()` and log them as split `val`. */
  evaluate?: {
    /** Evaluate every this many steps. */
    every: number;
    /** The evaluation's groups (the same scenarios each time, for a fair curve). */
    groups: () => TrajectoryGroup[];
  };
  /**
   * Steps the rollouts may run ahead of training (default 0: gather, train, evaluate, in turn). With
   * 1 or 2 the next steps' rollouts run while a step trains, and evaluations run beside training.
   */
  maxStepsOffPolicy?: number;
  /** What happens to a group further behind than `maxStepsOffPolicy`: `"drop"` (default) or `"retry"`. */
  staleGroups?: "drop" | "retry";
  /** Rollouts of a step that may throw before the loop stops: a count, or a fraction below 1 (default 0). */
  maxExceptions?: number;
  /** Metrics drawn on the live chart (default `["reward"]`). */
  metrics?: string[];
  /** Rollouts running at once (default 64). */
  concurrency?: number;
  /** A chart to redraw (default: a new one below the cell). */
  chart?: DisplayHandle;
  /** Stops the loop (as Kernel > Interrupt does in a notebook): the model stays at its last committed step. */
  signal?: AbortSignal;
}

const TrainLoopOptionsSchema = z.object({
  model: z.instanceof(TrainableModel, { message: "must be a TrainableModel" }),
  steps: z.number().int().min(0).max(1_000_000),
  groups: functionOption<(step: number) => TrajectoryGroup[]>(),
  train: z.record(z.string(), z.unknown()).optional(),
  evaluate: z.object({ every: z.number().int().min(1), groups: functionOption<() => TrajectoryGroup[]>() }).strict().optional(),
  maxStepsOffPolicy: z.number().int().min(0).max(1000).optional(),
  staleGroups: z.enum(["drop", "retry"]).optional(),
  maxExceptions: z.number().min(0).optional(),
  metrics: z.array(z.string().min(1)).min(1).optional(),
  concurrency: z.number().int().min(1).max(100_000).optional(),
  chart: z.instanceof(DisplayHandle, { message: "must be a DisplayHandle" }).optional(),
  signal: z.instanceof(AbortSignal, { message: "must be an AbortSignal" }).optional(),
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
  /** What each stage did: busy seconds of rollouts and training (and both at once), stale groups. */
  pipeline: PipelineResult;
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

/** What the progress line says while a pipeline runs: each busy stage, with counts. */
function describeStages(state: PipelineState): string {
  const parts: string[] = [];
  if (state.training) {
    parts.push(`step ${state.training.step}: training${state.training.gradientStep ? ` (gradient step ${state.training.gradientStep}/${state.training.gradientSteps})` : ""}`);
  }
  for (const g of state.gathering) parts.push(`step ${g.step}: gathering ${g.done}/${g.total} rollouts${g.exceptions ? ` (${g.exceptions} failed)` : ""}`);
  if (state.queued.length) parts.push(`queued: step ${state.queued.join(", ")}`);
  if (state.evaluating) parts.push(`evaluating step ${state.evaluating.step}: ${state.evaluating.done}/${state.evaluating.total} rollouts`);
  if (state.staleDropped || state.staleRetried) parts.push(`stale groups: ${state.staleDropped} dropped, ${state.staleRetried} retried`);
  return parts.join(" · ");
}

/**
 * Stops the loop on SIGINT in a notebook kernel: Kernel > Interrupt signals the kernel, and tslab
 * rejects the cell but cannot stop the promises still running. A plain script keeps Node's
 * default, so Ctrl-C still ends it. Call it after an await: while a cell's first synchronous part
 * runs, Node detaches the kernel's SIGINT handlers (vm's breakOnSigint), so none would be seen.
 */
function stopOnKernelInterrupt(controller: AbortController): () => void {
  if (process.env.ART_TS_KERNEL !== "1" && process.listenerCount("SIGINT") === 0) return () => {};
  const onInterrupt = () => controller.abort(new StoppedError("trainLoop: interrupted (Kernel > Interrupt); the model stays at its last committed step"));
  process.on("SIGINT", onInterrupt);
  return () => process.off("SIGINT", onInterrupt);
}

/**
 * Runs `steps` GRPO steps. From the first second a progress line says what runs (evaluating,
 * gathering a step's rollouts, training on them) with counts and the time; the chart of
 * `metrics` per step (train and val) is redrawn after every step. A point at step s is the
 * rollouts sampled by the model at step s; training on them makes step s + 1. With
 * `maxStepsOffPolicy` above 0 the stages overlap (see {@link trainPipeline}). Interrupting the
 * kernel stops every rollout and leaves the model at its last committed step; running the cell
 * again continues from there.
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
  const caption = chartCaption(options);
  let marks: ChartMark[] = [];
  const plot = (rows: HistoryRow[], live: boolean) => void plotHistory(rows, metrics, { chart, live, marks, caption });
  let history: HistoryRow[] = [];
  const controller = new AbortController();
  const forward = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener("abort", forward, { once: true });
  let release = () => {};
  let pipeline: PipelineResult;
  try {
    const first = await model.getStep();
    release = stopOnKernelInterrupt(controller);
    marks = runMarks(model, first);
    // A run that continues (the cell re-run) shows its curve so far right away.
    history = await model.historyRows();
    if (history.length) plot(history, true);
    let lastTrain = "";
    let lastVal = "";
    const redraw = async () => {
      last = [lastTrain, lastVal].filter(Boolean).join(" · ");
      history = await model.historyRows();
      plot(history, true);
      draw();
    };
    pipeline = await trainPipeline({
      model, steps, groups: options.groups, signal: controller.signal,
      ...(options.train ? { train: options.train } : {}),
      ...(options.evaluate ? { evaluate: options.evaluate } : {}),
      ...(options.maxStepsOffPolicy !== undefined ? { maxStepsOffPolicy: options.maxStepsOffPolicy } : {}),
      ...(options.staleGroups ? { staleGroups: options.staleGroups } : {}),
      ...(options.maxExceptions !== undefined ? { maxExceptions: options.maxExceptions } : {}),
      concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
      onProgress: (state) => {
        completed = state.stepsDone;
        phase = describeStages(state);
        draw();
      },
      onStep: async (event) => {
        if (event.type === "train") lastTrain = `step ${event.step} reward ${event.reward.toFixed(3)}`;
        else lastVal = `val ${Number(event.row.reward).toFixed(3)} at step ${event.step}`;
        await redraw();
      },
    });
    phase = "";
  } finally {
    release();
    options.signal?.removeEventListener("abort", forward);
    clearInterval(ticker); // also when the first request fails: no line keeps ticking after the cell
    // The last drawing is a plotly bundle, which the saved notebook keeps (also after an error).
    history = await model.historyRows().catch(() => history);
    if (history.length) plot(history, false);
  }
  const seconds = (Date.now() - started) / 1000;
  progress.finish({ done: completed, total: steps, detail: [last, `${seconds.toFixed(0)} s`].filter(Boolean).join(" · ") });
  return { history, seconds, chart, marks, pipeline };
}
