/**
 * `TrainableModel`: a LoRA trained on a backend, served as `name@step` (`Model`, chat-model.ts, is
 * only called; rollout code takes either). What its training calls take: train-inputs.ts. @module
 */
import OpenAI from "openai";
import { z } from "zod";
import { recordingFetch } from "../capture/recording-fetch";
import { runRollout } from "../capture/rollout-context";
import { type LoraConfig, LoraConfigSchema } from "../core/config";
import {
  deleteCheckpointsFromWire, historyRowFromWire, loraToWire, metricNameToWire, registeredModelFromWire, sftConfigToWire,
  trainConfigToWire, trainEventFromWire,
} from "../core/convert";
import { BadTrajectoryError, ModelNotRegisteredError, ServerProtocolError, ServerUnreachableError, StoppedError } from "../core/errors";
import { judgeUsageToWire } from "../core/judge-usage";
import { parseOptions, safeNameOption } from "../core/options";
import type { DeleteCheckpointsResult, HistoryRow, RegisteredModel, StepMetrics, Tracker, TrainEvent, TrainResult } from "../core/results";
import { Trajectory, type TrajectoryGroup, type TrajectoryInit } from "../core/trajectory";
import { ConversationWire, DeleteCheckpointsWire, HistoryRowWire, ModelInfo, type DeleteCheckpointsBody, type LogBody, type RegisterBody, type SftBody, type TrainBody } from "../core/wire";
import { notice } from "../display/notice";
import { ProgressLine } from "../display/progress-line";
import type { Backend } from "./backend";
import { DEFAULT_BASE_MODEL } from "./base-model";
import { splitMetric } from "./best-step";
import { currentCallScope, joinSignals, withCallScope } from "./call-scope";
import type { ChatModel } from "./chat-model";
import { historyFrame, type HistoryFrame } from "./history-frame";
import {
  checkTrainOptions, type Conversation, DeleteCheckpointsOptionsSchema, LogOptionsSchema, readJsonl, toWireGroups, type TrainOptions,
  type TrainSftOptions, TrainSftOptionsSchema,
} from "./train-inputs";

/** Options of a {@link TrainableModel}. */
export interface TrainableModelOptions {
  /** The model's name: served as `name@step` (letters, digits, `.`, `_`, `-`). */
  name: string;
  /** A project groups models on disk: `<dataDir>/<project>/models/<name>/`. */
  project: string;
  /**
   * The base model (default {@link DEFAULT_BASE_MODEL}): a Hugging Face id the server has (local cache
   * or packaged), `builtin:tiny` / `builtin:small`, or a folder on the server.
   */
  baseModel?: string;
  /** LoRA configuration (defaults r=8, alpha=16, dropout 0, all attention and MLP projections). */
  lora?: LoraConfig;
  /**
   * What an hour of the server's machine costs, in US dollars (e.g. 2.5 for a rented H100): each
   * step's metrics then hold `costUsd` for its sampling and training time (default: the server's
   * `--gpu-cost-per-hour-usd`, else not priced).
   */
  gpuCostPerHourUsd?: number;
  /**
   * Experiment trackers the server sends each of this model's history rows to (train and val
   * metrics, the step's timings), as they are written, with no change to the training loop:
   * `"wandb"` (Weights & Biases: online with `WANDB_API_KEY` set where the server runs, or
   * `WANDB_MODE=offline`) and `"trackio"` (a local dashboard: `npm run dashboard`). Default: the
   * server's `--report`; `[]` reports nowhere. A tracker that fails never fails a step: one notice.
   */
  report?: Tracker[];
  /** How many trajectories of each step go to the trackers as a table (0 to 64; default the server's, 0). */
  reportTrajectories?: number;
}

const MAX_PRICE_PER_HOUR = 100_000; // the server's bound on gpu_cost_per_hour_usd (core/bounds.py)
const MAX_REPORTED_TRAJECTORIES = 64; // the server's bound on report_trajectories (core/bounds.py)

const TrainableModelOptionsSchema = z.object({
  name: safeNameOption,
  project: safeNameOption,
  baseModel: z.string().min(1).optional(),
  lora: LoraConfigSchema.optional(),
  gpuCostPerHourUsd: z.number().min(0).max(MAX_PRICE_PER_HOUR).finite().optional(),
  report: z.array(z.enum(["wandb", "trackio"])).max(2).optional(),
  reportTrajectories: z.number().int().min(0).max(MAX_REPORTED_TRAJECTORIES).optional(),
}).strict();

/**
 * A model trained with LoRA on a backend.
 *
 * ```ts
 * const model = new TrainableModel({ name: "agent", project: "tictactoe" });   // SmolLM2-135M-Instruct
 * await model.register(backend);
 * const client = model.openai();      // asks for token ids and logprobs on every request
 * ```
 */
export class TrainableModel implements ChatModel {
  /** Its name within the project; steps are served as `name@step`. */
  readonly name: string;
  /** The project it belongs to (a folder on the server). */
  readonly project: string;
  /** The base model its LoRA adapter trains on. */
  readonly baseModel: string;
  /** Its LoRA configuration, or undefined for the server's defaults. */
  readonly lora: LoraConfig | undefined;
  /** What an hour of the server's machine costs (US dollars), or undefined for the server's price. */
  readonly gpuCostPerHourUsd: number | undefined;
  /** The trackers its history rows go to, or undefined for the server's `--report`. */
  readonly report: Tracker[] | undefined;
  /** Trajectories of each step sent to the trackers as a table, or undefined for the server's default. */
  readonly reportTrajectories: number | undefined;
  /**
   * The fetch for frameworks (with {@link TrainableModel.baseURL}): asks every chat completion for
   * token ids and logprobs, and records it inside {@link TrainableModel.rollout}.
   */
  readonly fetch: typeof fetch;
  private backendRef: Backend | undefined;
  private client: OpenAI | undefined;
  private step = 0;
  /** Notices already shown for this model (each cause once). */
  private readonly noticesShown = new Set<string>();

  constructor(options: TrainableModelOptions) {
    parseOptions("new TrainableModel", TrainableModelOptionsSchema, options);
    this.name = options.name;
    this.project = options.project;
    this.baseModel = options.baseModel ?? DEFAULT_BASE_MODEL;
    this.lora = options.lora;
    this.gpuCostPerHourUsd = options.gpuCostPerHourUsd;
    this.report = options.report;
    this.reportTrajectories = options.reportTrajectories;
    this.fetch = recordingFetch({ owner: this, label: this.name, askForTokens: true, base: (input, init) => this.backendFetch(input, init) });
  }

  /** The backend it is registered on. */
  get backend(): Backend {
    if (!this.backendRef) throw new ModelNotRegisteredError(`model ${this.name} is not registered: call \`await model.register(backend)\` first`);
    return this.backendRef;
  }

  /** Registers (step 0) or resumes (latest step) the model on `backend`. */
  async register(backend: Backend): Promise<RegisteredModel> {
    const info = await backend.request("POST", "/v1/art/models/register", ModelInfo, {
      name: this.name, project: this.project, base_model: this.baseModel, ...(this.lora ? { lora: loraToWire(this.lora) } : {}),
      ...(this.report ? { report: this.report } : {}),
      ...(this.reportTrajectories === undefined ? {} : { report_trajectories: this.reportTrajectories }),
    } satisfies RegisterBody);
    this.backendRef = backend;
    this.client = undefined;
    this.step = info.step;
    return registeredModelFromWire(info);
  }

  /**
   * `name@step` for a step, or the bare name (its latest step) when none is given; inside
   * {@link TrainableModel.atStep} the step given there.
   */
  inferenceName(step?: number): string {
    const pinned = step ?? currentCallScope(this)?.step;
    return pinned === undefined ? this.name : `${this.name}@${pinned}`;
  }

  /**
   * Runs `fn` with `model.inferenceName()` naming `step` (`name@step`) instead of the latest one,
   * e.g. to evaluate step s while training goes on: every rollout started inside asks step s.
   */
  atStep<T>(step: number, fn: () => T): T {
    if (!Number.isInteger(step) || step < 0) throw new BadTrajectoryError(`model.atStep: step must be an integer >= 0, got ${step}`);
    return withCallScope(this, { step }, fn);
  }

  /** The latest step, asked of the backend. */
  async getStep(): Promise<number> {
    const info = await this.info();
    this.step = info.step;
    return info.step;
  }

  /**
   * The model as the server describes it now: its step, whether a step is training, where it was
   * forked from, and how its reporters to experiment trackers are doing.
   */
  async getInfo(): Promise<RegisteredModel> {
    const info = await this.info();
    this.step = info.step;
    return registeredModelFromWire(info);
  }

  private info(): Promise<ModelInfo> {
    return this.backend.request("GET", `/v1/art/models/${encodeURIComponent(this.name)}`, ModelInfo);
  }

  /** The backend's OpenAI-compatible base URL (`<server>/v1`). */
  get baseURL(): string {
    return `${this.backend.url}/v1`;
  }

  /**
   * The backend's root URL, for SDKs that add `/v1` themselves: Anthropic's,
   * `new Anthropic({ baseURL: model.serverURL, apiKey: model.apiKey, fetch: model.fetch })`.
   */
  get serverURL(): string {
    return this.backend.url;
  }

  /** The backend's bearer token, as the API key frameworks send. */
  get apiKey(): string {
    return this.backend.token;
  }

  /**
   * An `openai` client for the backend's OpenAI-compatible endpoint. Every chat completion it
   * sends asks for logprobs and token ids, so choices can be pushed into trajectories and trained;
   * inside {@link TrainableModel.rollout} they are recorded without pushing.
   */
  openai(): OpenAI {
    if (!this.client) {
      this.client = new OpenAI({ baseURL: this.baseURL, apiKey: this.apiKey, fetch: this.fetch, maxRetries: 2 });
    }
    return this.client;
  }

  /**
   * Runs agent code in a rollout and resolves with its trajectory: every chat completion sent
   * through {@link TrainableModel.fetch} (any framework given it) or `openai()` while `fn` runs
   * is recorded in order with its prompt ids, token ids and logprobs, streamed or not, with the
   * tool calls and tool results between them. Parallel rollouts do not mix.
   *
   * ```ts
   * const t = await model.rollout(async (t) => {
   *   const { text } = await generateText({ model: provider(model.inferenceName()), tools, prompt, stopWhen: stepCountIs(5) });
   *   t.reward = text.includes(answer) ? 1 : 0;
   * });
   * ```
   */
  rollout(fn: (trajectory: Trajectory) => unknown, init?: TrajectoryInit): Promise<Trajectory> {
    return runRollout(this, fn, init);
  }

  /**
   * One GRPO step on `groups`. Validates first (empty groups, non-finite rewards, choices without
   * token ids: the message names the trajectory), warns about groups whose rewards are all equal,
   * shows progress, and returns the new step with its metrics.
   */
  async train(groups: TrajectoryGroup[], options: TrainOptions = {}): Promise<TrainResult> {
    const { servePreviousDuringTraining, progress, onEvent, signal, staleGroupCounts, sampling, ...config } = checkTrainOptions("model.train", options);
    const wire = toWireGroups(groups, config.allowTrainingWithoutLogprobs ? "or plain assistant messages" : "sampled");
    const flat = groups.filter((g) => g.hasZeroVariance()).length;
    // Shown once per model: a converging (or stuck) run has flat groups step after step, and each
    // step's metrics.groupsSkippedByReason keeps counting them.
    if (flat) {
      notice(`${flat} of ${groups.length} groups have the same reward for every trajectory: GRPO gets no gradient ` +
        "from them. Make the reward tell rollouts apart (partial credit, more rollouts per group). " +
        "Shown once; each step's metrics.groupsSkippedByReason keeps counting.", { key: "flat-groups", seen: this.noticesShown });
    }
    return this.runStep("train", { groups: wire, config: trainConfigToWire(config),
      serve_previous_during_training: servePreviousDuringTraining ?? false,
      ...(staleGroupCounts ? { stale_groups_dropped: staleGroupCounts.dropped, stale_groups_retried: staleGroupCounts.retried } : {}),
      ...(sampling ? { sampled_tokens: sampling.tokens, sampling_seconds: sampling.seconds } : {}),
      ...judgeUsageToWire(groups), ...this.price() } satisfies TrainBody,
    progress ?? true, onEvent, signal);
  }

  /**
   * One SFT step: trains on conversations (trajectories, `{messages, tools?}` objects, or the path
   * of a JSONL file of them), loss on assistant turns. Makes a new step that RL continues from.
   */
  async trainSft(data: Trajectory[] | Conversation[] | string, options: TrainSftOptions = {}): Promise<TrainResult> {
    const { progress, onEvent, ...config } = parseOptions("model.trainSft", TrainSftOptionsSchema, options);
    if (typeof data !== "string" && !Array.isArray(data)) {
      throw new BadTrajectoryError("model.trainSft: data must be trajectories, {messages, tools?} objects, or the path of a JSONL file of them");
    }
    const conversations = typeof data === "string" ? readJsonl(data) : data.map((item) =>
      item instanceof Trajectory ? { messages: item.messages(), ...(item.tools ? { tools: item.tools } : {}) } : item);
    if (!conversations.length) throw new BadTrajectoryError("model.trainSft: no conversations to train on");
    const wire = conversations.map((c, i) => {
      if (!c || !Array.isArray(c.messages) || !c.messages.some((m) => m?.role === "assistant")) {
        throw new BadTrajectoryError(`model.trainSft: conversation ${i} has no assistant message to learn from`);
      }
      // Checked here, so a message the server cannot take names its conversation before anything is sent.
      const parsed = ConversationWire.safeParse(c);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new BadTrajectoryError(`model.trainSft: conversation ${i}, ${issue?.path.join(".") || "it"}: ${issue?.message ?? "invalid"}`);
      }
      return parsed.data;
    });
    return this.runStep("train_sft", { conversations: wire, config: sftConfigToWire(config), ...this.price() } satisfies SftBody,
      progress ?? true, onEvent);
  }

  private price(): { gpu_cost_per_hour_usd?: number } {
    return this.gpuCostPerHourUsd === undefined ? {} : { gpu_cost_per_hour_usd: this.gpuCostPerHourUsd };
  }

  /** The metrics history as a danfo DataFrame (needs the optional `danfojs-node`): step, split, and a column per numeric metric. */
  async history(): Promise<HistoryFrame> {
    const rows = await this.historyRows();
    return historyFrame(rows);
  }

  /** The metrics history as plain rows (the server's metric names in camelCase, yours as you named them). */
  async historyRows(): Promise<HistoryRow[]> {
    const body = await this.backend.request("GET", `/v1/art/models/${encodeURIComponent(this.name)}/history`, z.object({ rows: z.array(HistoryRowWire) }));
    return body.rows.map(historyRowFromWire);
  }

  /** Deletes every checkpoint but the latest and the best by `keepBestBy` (`split/metric`, default `val/reward`). */
  async deleteCheckpoints(options: { keepBestBy?: string } = {}): Promise<DeleteCheckpointsResult> {
    const { keepBestBy = "val/reward" } = parseOptions("model.deleteCheckpoints", DeleteCheckpointsOptionsSchema, options);
    const [split, metric] = splitMetric(keepBestBy);
    const result = await this.backend.request("POST", `/v1/art/models/${encodeURIComponent(this.name)}/delete_checkpoints`,
      DeleteCheckpointsWire, { keep_best_by: `${split}/${metricNameToWire(metric)}` } satisfies DeleteCheckpointsBody);
    return deleteCheckpointsFromWire(result);
  }

  /**
   * Stores groups (default split "val") and their metrics at the current step, or at `step` (one the
   * model has reached, e.g. the step an evaluation sampled while training went on); returns the history row.
   */
  async log(groups: TrajectoryGroup[], options: { split?: string; step?: number } = {}): Promise<HistoryRow> {
    const { split = "val", step } = parseOptions("model.log", LogOptionsSchema, options);
    const row = await this.backend.request("POST", `/v1/art/models/${encodeURIComponent(this.name)}/log`, HistoryRowWire,
      { split, groups: toWireGroups(groups, false), ...(step !== undefined ? { step } : {}), ...judgeUsageToWire(groups) } satisfies LogBody);
    return historyRowFromWire(row);
  }

  /**
   * The fetch under {@link TrainableModel.fetch}: a backend that can no longer be used (closed,
   * crashed) answers with its message as an OpenAI-style 410, which clients report as is and do not retry.
   */
  private async backendFetch(input: Parameters<typeof fetch>[0], init?: RequestInit): Promise<Response> {
    const unusable = this.backendRef?.unusable?.();
    if (unusable) {
      return new Response(JSON.stringify({ error: { message: `${unusable.name}: ${unusable.message}`, type: "backend_unusable", code: null } }),
        { status: 410, headers: { "Content-Type": "application/json" } });
    }
    // A stopped pipeline aborts the calls its rollouts still have running (see call-scope.ts).
    const signal = joinSignals(init?.signal, currentCallScope(this)?.signal);
    return fetch(input, signal ? { ...init, signal } : init);
  }

  protected async runStep(kind: "train" | "train_sft", body: TrainBody | SftBody, showProgress: boolean,
    onEvent?: (event: TrainEvent) => void, signal?: AbortSignal): Promise<TrainResult> {
    const bar = showProgress ? new ProgressLine(kind === "train" ? `train ${this.name}` : `sft ${this.name}`) : null;
    const events: TrainEvent[] = [];
    try {
      await this.streamStep(kind, body, events, bar, onEvent, signal);
    } catch (error) {
      const start = events[0];
      if ((error instanceof ServerUnreachableError || error instanceof StoppedError) && start?.type === "start") {
        throw await this.stepOutcome(error, start.step);
      }
      // Stopped before the start line arrived: the server may have begun the step all the same (it
      // rolls it back when it sees the client gone). Wait for that too, so nothing trains once this returns.
      if (error instanceof StoppedError) throw await this.stepOutcome(error, undefined);
      throw error;
    }
    const result = events[events.length - 1];
    if (!result || result.type !== "result") {
      throw new ServerProtocolError(`model.${kind === "train" ? "train" : "trainSft"}: the server's stream ended without a result; ` +
        "the step may not have completed: call model.getStep() to see where the model is");
    }
    this.step = result.step;
    bar?.finish({ done: 1, total: 1, detail: `step ${result.step}` });
    const { step: fromStep, split: _split, time: _time, trainedIntoStep: _into, ...metrics } = result.metrics;
    return { step: result.step, fromStep, metrics: metrics as StepMetrics, events };
  }

  private async streamStep(kind: "train" | "train_sft", body: unknown, events: TrainEvent[], bar: ProgressLine | null,
    onEvent?: (event: TrainEvent) => void, signal?: AbortSignal): Promise<void> {
    await this.backend.stream(`/v1/art/models/${encodeURIComponent(this.name)}/${kind}`, body, (line) => {
      const event = trainEventFromWire(line);
      events.push(event);
      if (event.type === "progress") {
        bar?.update({ done: event.gradientStep, total: event.gradientSteps, detail: `loss ${event.loss.toFixed(4)} · grad ${event.gradNorm.toFixed(3)}` });
      } else if (event.type === "warning") {
        // A warning repeated step after step (e.g. "nothing to train") is shown once per model.
        notice(event.message, { seen: this.noticesShown });
      }
      onEvent?.(event);
    }, signal);
  }

  /**
   * The connection broke (or was aborted) during a step the server had started (`step`: the step it
   * makes; undefined when its start line had not arrived): the server finishes it on its own (it
   * commits it whole, or rolls it back whole), so wait for that and say which.
   */
  private async stepOutcome<E extends ServerUnreachableError | StoppedError>(error: E, step: number | undefined): Promise<E> {
    let outcome = "call model.getStep() once the server answers to see whether the step was saved";
    try {
      const deadline = Date.now() + 30_000;
      let info = await this.info();
      while (info.training && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 200));
        info = await this.info();
      }
      this.step = info.step;
      if (!info.training) {
        outcome = step === undefined ? `the model is at step ${info.step}`
          : info.step >= step ? `the server saved the step before the connection broke: the model is at step ${info.step}`
          : `the server rolled the step back: the model is still at step ${info.step}; train again`;
      }
    } catch {
      // the server does not answer: the outcome stays unknown
    }
    const Type = error.constructor as new (message: string, options: { cause: unknown }) => E;
    return new Type(`${error.message}. ${outcome}`, { cause: error });
  }
}
