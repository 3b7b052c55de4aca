/**
 * A notebook run's verdict: the trained agent's score on the evaluation games with its 95%
 * interval, next to each scripted baseline, and whether it beats every one of them by more than
 * that interval. Shown in the evaluation cell and written as JSON
 * (`notebooks/results/<notebook>.json`), so a full run's claim can be checked by a program.
 * @module
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Trajectory } from "../core/trajectory";
import { showTable } from "../display/table";
import type { EvalResult } from "./evaluate";
import { interval95, type Interval95 } from "./interval";

/** What {@link reportResults} writes: one full (or smoke) run of a notebook. */
export interface RunResults {
  /** The notebook's name, e.g. `tictactoe`. */
  notebook: string;
  /** The evaluation metric compared (`reward`, or a metric such as `win`); higher is better. */
  metric: string;
  /** How many evaluation games each policy played (the interval's sample size). */
  evalGames: number;
  /** The untrained model's score. */
  untrained: number;
  /** The trained model's score. */
  trained: number;
  /** The 95% interval of the trained model's score. */
  trainedInterval95: [number, number];
  /** How the interval was computed: `wilson` (a rate) or `t` (a mean). */
  intervalMethod: Interval95["method"];
  /** Each scripted baseline's score, by its label. */
  baselines: Record<string, number>;
  /** True when the interval's lower end is above every baseline. */
  beatsEveryBaseline: boolean;
  /** Each reference player's score (shown for scale, not a baseline to beat), by its label; absent when there are none. */
  references?: Record<string, number>;
  /** Seconds from the parameters cell to this report. */
  wallSeconds: number;
  /** The CPU the notebook's kernel ran on, its core count and widest vector unit, e.g. `AMD EPYC (2 cores, AVX2)`. */
  machine: string;
  /** The base model trained, when given. */
  baseModel?: string;
  /** The notebook's seed. */
  seed: number;
  /** True for the tests' short run (`ART_SMOKE=1`), whose numbers mean nothing. */
  smoke: boolean;
  /** When the report was written (ISO 8601). */
  date: string;
}

/** What a notebook's evaluation cell passes to {@link reportResults}. */
export interface ReportOptions {
  /** The notebook's name: the file written is `<notebook>.json`, or `<notebook>-seed<N>.json` for seed N other than 0. */
  notebook: string;
  /** The metric to compare: `reward` or one of the trajectories' metrics (booleans count as 0/1). */
  metric: string;
  /** The untrained model's evaluation. */
  untrained: EvalResult;
  /** The trained model's evaluation, on the same games. */
  trained: EvalResult;
  /** The scripted baselines' evaluations, on the same games: the trained agent should beat each. */
  baselines: readonly EvalResult[];
  /**
   * Scripted players shown for scale that the trained agent is not expected to beat, on the same
   * games: the teacher of a warm start, an oracle that knows the answers. Listed in the table and
   * the JSON, left out of the verdict.
   */
  references?: readonly EvalResult[];
  /** The notebook's seed. */
  seed: number;
  /** When the run began (`P.startedAt` of the parameters cell), for `wallSeconds`. */
  startedAt: number;
  /** A short test run: written to `.art/results/`, never over a full run's evidence. */
  smoke?: boolean;
  /** The base model trained (`P.baseModel`). */
  baseModel?: string;
  /**
   * Which game a trajectory belongs to, where one game makes several trajectories (codenames'
   * four seats): their scores are averaged into one value per game before the interval, since they
   * are not independent. Default: each trajectory is its own game.
   */
  gameOf?: (trajectory: Trajectory) => unknown;
  /** What one evaluation case is called in the verdict line (default `games`; e.g. `questions`). */
  unit?: string;
  /** The folder to write to (default: `notebooks/results` for a full run, `.art/results` for a smoke run, under the working directory). */
  dir?: string;
}

function scoreOf(trajectory: Trajectory, metric: string): number {
  if (metric === "reward") return trajectory.reward;
  const value = trajectory.metrics[metric];
  if (typeof value === "boolean") return Number(value);
  if (typeof value === "number") return value;
  throw new RangeError(`a trajectory has no numeric metric "${metric}" (its metrics: ${Object.keys(trajectory.metrics).join(", ") || "none"})`);
}

/** The 95% interval of `metric` over an evaluation's games (by default each trajectory is one; see {@link ReportOptions.gameOf}). */
export function evalInterval(result: EvalResult, metric: string, gameOf: (trajectory: Trajectory) => unknown = (t) => t): Interval95 {
  const games = new Map<unknown, number[]>();
  for (const t of result.results) {
    const key = gameOf(t);
    const scores = games.get(key) ?? [];
    scores.push(scoreOf(t, metric));
    games.set(key, scores);
  }
  return interval95([...games.values()].map((scores) => scores.reduce((a, b) => a + b, 0) / scores.length));
}

/** The kernel's CPU, its core count, and its widest vector unit (which decides bf16 or fp32 on the server's CPU engine). */
function machineName(): string {
  const cpus = os.cpus();
  let flags: string[] = [];
  try {
    flags = /^flags\s*:\s*(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(" ") ?? [];
  } catch {
    // not Linux: the model name and cores say enough
  }
  const unit = ["amx_bf16", "avx512_bf16", "avx512f", "avx2"].find((f) => flags.includes(f));
  const units: Record<string, string> = { amx_bf16: "AMX", avx512_bf16: "AVX512-BF16", avx512f: "AVX-512", avx2: "AVX2" };
  return `${cpus[0]?.model.trim() ?? "unknown CPU"} (${cpus.length} cores${unit ? `, ${units[unit]}` : ""})`;
}

const fixed = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : String(x));

/**
 * Shows the trained model against the untrained one and every scripted baseline (score and 95%
 * interval), says whether it beats each baseline by more than its interval, and writes the run's
 * {@link RunResults} as `<dir>/<notebook>.json` (`<notebook>-seed<N>.json` for a seed other than
 * 0, the notebooks' default). Returns what it wrote.
 */
export function reportResults(options: ReportOptions): RunResults {
  const { metric, gameOf } = options;
  const trained = evalInterval(options.trained, metric, gameOf);
  const untrained = evalInterval(options.untrained, metric, gameOf);
  const baselines = options.baselines.map((b) => ({ label: b.label, interval: evalInterval(b, metric, gameOf) }));
  const references = (options.references ?? []).map((r) => ({ label: r.label, interval: evalInterval(r, metric, gameOf) }));
  const beats = (score: number) => trained.low > score;
  // Compared rows say whether the trained agent clears them; the trained row and references do not.
  const row = (label: string, interval: Interval95, kind: "compared" | "trained" | "reference") => ({
    policy: label, [metric]: interval.mean, "95% low": interval.low, "95% high": interval.high,
    "trained is above by more than its interval": kind === "compared" ? (beats(interval.mean) ? "yes" : "no") : kind === "reference" ? "(reference)" : "",
  });
  showTable([
    row(options.untrained.label, untrained, "compared"),
    ...baselines.map(({ label, interval }) => row(label, interval, "compared")),
    row(options.trained.label, trained, "trained"),
    ...references.map(({ label, interval }) => row(label, interval, "reference")),
  ]);
  const losing = baselines.filter(({ interval }) => !beats(interval.mean)).map(({ label, interval }) => `${label} ${fixed(interval.mean)}`);
  console.log(`trained ${metric} ${fixed(trained.mean)}, 95% interval ${fixed(trained.low)} to ${fixed(trained.high)} over ${trained.n} ${options.unit ?? "games"}: ` +
    (losing.length ? `not above ${losing.join(", ")} by more than its interval` : `above every baseline by more than its interval`));
  const results: RunResults = {
    notebook: options.notebook,
    metric,
    evalGames: trained.n,
    untrained: untrained.mean,
    trained: trained.mean,
    trainedInterval95: [trained.low, trained.high],
    intervalMethod: trained.method,
    baselines: Object.fromEntries(baselines.map(({ label, interval }) => [label, interval.mean])),
    beatsEveryBaseline: losing.length === 0,
    ...(references.length ? { references: Object.fromEntries(references.map(({ label, interval }) => [label, interval.mean])) } : {}),
    wallSeconds: Math.round((Date.now() - options.startedAt) / 1000),
    machine: machineName(),
    ...(options.baseModel === undefined ? {} : { baseModel: options.baseModel }),
    seed: options.seed,
    smoke: options.smoke ?? false,
    date: new Date().toISOString(),
  };
  const dir = path.resolve(options.dir ?? (results.smoke ? path.join(".art", "results") : path.join("notebooks", "results")));
  fs.mkdirSync(dir, { recursive: true });
  // The notebooks' default seed is 0: a run with another seed is kept beside it, not over it.
  const file = path.join(dir, options.seed === 0 ? `${options.notebook}.json` : `${options.notebook}-seed${options.seed}.json`);
  fs.writeFileSync(file, JSON.stringify(results, null, 2) + "\n");
  console.log(`results written to ${path.relative(process.cwd(), file) || file}`);
  return results;
}
