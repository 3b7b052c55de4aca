/**
 * The training loop every cookbook notebook runs: gather groups of rollouts, train one GRPO step
 * on them, evaluate now and then, and redraw the reward curve in place.
 * @module
 */
import { z } from "zod";
import { TrainableModel } from "../client/model";
import { checkTrainOptions } from "../client/train-inputs";
import { trainPipeline } from "../client/pipeline";
import { type PipelineOptions, PipelineOptionsSchema, type PipelineResult, type PipelineState } from "../client/pipeline-options";
import { StoppedError } from "../core/errors";
import { parseOptions } from "../core/options";
import type { HistoryRow } from "../core/results";
import { DisplayHandle } from "../display/output";
import { ProgressLine } from "../display/progress-line";
import { type ChartMark, plotHistory } from "./history-plot";

/** The options `trainLoop` shares with {@link trainPipeline}, passed on as they are. */
type SharedOptions = "model" | "steps" | "groups" | "scoreGroup" | "train" | "evaluate" | "maxStepsOffPolicy" | "staleGroups" | "maxExceptions" | "concurrency";

/**
 * Options of {@link trainLoop}: those of {@link trainPipeline} that a notebook sets (the model,
 * steps, groups, GRPO settings, evaluation, off-policy steps, exceptions, concurrency, a stop
 * signal), and the chart's.
 */
export interface TrainLoopOptions extends Pick<PipelineOptions, SharedOptions> {
  /** Metrics drawn on the live chart (default `["reward"]`). */
  metrics?: string[];
  /** A chart to redraw (default: a new one below the cell). */
  chart?: DisplayHandle;
  /** Stops the loop (as Kernel > Interrupt does in a notebook): the model stays at its last committed step. */
  signal?: AbortSignal;
}

const TrainLoopOptionsSchema = PipelineOptionsSchema.pick({
  model: true, steps: true, groups: true, scoreGroup: true, train: true, evaluate: true, maxStepsOffPolicy: true, staleGroups: true,
  maxExceptions: true, concurrency: true, signal: true,
}).extend({
  metrics: z.array(z.string().min(1)).min(1).optional(),
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
    const { metrics: _metrics, chart: _chart, signal: _signal, ...shared } = options;
    pipeline = await trainPipeline({
      ...shared, signal: controller.signal,
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
