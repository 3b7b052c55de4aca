/**
 * Trajectories: one rollout's conversation, where the assistant turns sampled from the trained
 * model keep the exact token ids and logprobs the server returned, plus its reward and metrics.
 * @module
 */
import type OpenAI from "openai";
import { BadTrajectoryError } from "./errors";
import type { JudgeUsage } from "./judge-usage";
import { samplingFromWire, samplingToWire } from "./convert";
import type { SamplingParams } from "./sampling-params";
import { TokenFields, type TrajectoryWire } from "./wire";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;
/** A message as the OpenAI client takes it. */
export type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
/** A tool definition as the OpenAI client takes it. */
export type ToolParam = OpenAI.Chat.Completions.ChatCompletionFunctionTool;

/** An assistant turn sampled from the model, with what training needs. */
export interface SampledChoice {
  /** Tells a sampled choice from a message in `messagesAndChoices`. */
  readonly kind: "choice";
  /** The choice as the OpenAI client returned it. */
  readonly choice: ChatCompletion["choices"][number];
  /** The prompt as the server tokenised it. */
  readonly promptTokenIds: number[];
  /** The sampled token ids. */
  readonly tokenIds: number[];
  /** The logprob of each sampled token, under the distribution it was sampled from. */
  readonly logprobs: number[];
  /** The server's provenance tag (which server and base model sampled it), sent back when training. */
  readonly provenance?: string;
  /** The trained model's step that sampled it (absent for the base model and other endpoints). */
  readonly policyStep?: number;
  /** The sampling parameters it was drawn with: the trainer scores the turn with them (absent from other endpoints). */
  readonly sampling?: SamplingParams;
  /** The completion's id: a completion recorded by a rollout and pushed by hand is kept once. */
  readonly completionId?: string;
}

/** Either a plain message (context) or a sampled choice (trained). */
export type MessageOrChoice = MessageParam | SampledChoice;

/** True for a sampled choice. */
export function isSampledChoice(item: MessageOrChoice): item is SampledChoice {
  return (item as SampledChoice).kind === "choice";
}

/**
 * The sampled choice `index` of a completion from a trained model's `openai()` client. Throws
 * {@link BadTrajectoryError} when the response lacks token ids or logprobs (e.g. it came from a
 * server that does not return them).
 */
export function sampledChoice(completion: ChatCompletion, index = 0): SampledChoice {
  const parsed = TokenFields.safeParse(completion);
  const choice = completion.choices[index];
  if (!choice) throw new BadTrajectoryError(`the completion has no choice ${index}`);
  const extra = parsed.success ? parsed.data.choices.find((c) => c.index === choice.index) : undefined;
  const logprobs = extra?.logprobs?.content?.map((e) => e.logprob);
  if (!parsed.success || !extra) {
    throw new BadTrajectoryError("this completion carries no prompt_token_ids / token_ids: sample with " +
      "`model.openai()` of a TrainableModel, whose server returns them");
  }
  if (!logprobs || logprobs.length !== extra.token_ids.length || logprobs.some((lp) => typeof lp !== "number" || !Number.isFinite(lp))) {
    throw new BadTrajectoryError(`this completion has ${extra.token_ids.length} token ids but ${logprobs ? "logprobs that are not all finite numbers" : "no logprobs"}: ` +
      "sample with `model.openai()` of a TrainableModel (it asks for logprobs); a null logprob means the model's outputs were not finite");
  }
  return {
    kind: "choice", choice, promptTokenIds: parsed.data.prompt_token_ids, tokenIds: extra.token_ids, logprobs: logprobs as number[],
    ...(extra.art_provenance ? { provenance: extra.art_provenance } : {}),
    ...(extra.art_policy_step !== undefined ? { policyStep: extra.art_policy_step } : {}),
    ...(extra.art_sampling ? { sampling: samplingFromWire(extra.art_sampling) } : {}),
    ...(completion.id ? { completionId: completion.id } : {}),
  };
}

/** What a new {@link Trajectory} can start with. */
export interface TrajectoryInit {
  /** The conversation so far: messages, and choices sampled by the server. */
  messagesAndChoices?: MessageOrChoice[];
  /** The tools the model was offered (OpenAI tool definitions). */
  tools?: ToolParam[];
  /** The reward (default 0). */
  reward?: number;
  /** Your metrics; booleans are averaged as rates. */
  metrics?: Record<string, number | boolean>;
  /** Anything to keep with it (not trained on). */
  metadata?: Record<string, unknown>;
}

/**
 * One rollout.
 *
 * ```ts
 * const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "Name an empty cell." }] });
 * const completion = await client.chat.completions.create({ model: model.inferenceName(), messages: t.messages() });
 * t.push(completion);          // keeps the token ids and logprobs
 * t.reward = score(completion.choices[0].message.content);
 * ```
 */
export class Trajectory {
  /** The conversation: messages, and the choices sampled by the server with their token ids and logprobs. */
  messagesAndChoices: MessageOrChoice[];
  /** The tools the model was offered (a captured rollout takes them from its requests). */
  tools: ToolParam[] | undefined;
  /** The reward GRPO compares within the group; set it in your rollout. */
  reward: number;
  /** Your metrics, averaged into the step's metrics under these names (booleans as rates). */
  metrics: Record<string, number | boolean>;
  /** Anything to keep with it (not trained on). */
  metadata: Record<string, unknown>;
  /** Free-form notes (a judge's explanation lands here). */
  logs: string[] = [];

  constructor(init: TrajectoryInit = {}) {
    this.messagesAndChoices = [...(init.messagesAndChoices ?? [])];
    this.tools = init.tools;
    this.reward = init.reward ?? 0;
    this.metrics = { ...(init.metrics ?? {}) };
    this.metadata = { ...(init.metadata ?? {}) };
  }

  /** The conversation as messages, for the next request (choices become their messages). */
  messages(): MessageParam[] {
    return this.messagesAndChoices.map((item) => (isSampledChoice(item) ? assistantMessage(item) : item));
  }

  /**
   * Appends a message, or choice `index` of a completion (keeping its token ids and logprobs). A
   * choice already in the trajectory (recorded by a rollout) is not added twice.
   */
  push(item: MessageParam | ChatCompletion, index = 0): this {
    if (!item || typeof item !== "object") throw new BadTrajectoryError(`trajectory.push takes a message or a chat completion (got ${item === null ? "null" : typeof item})`);
    if ("choices" in item) {
      const choice = sampledChoice(item, index);
      const held = this.choices().some((c) => c.completionId && c.completionId === choice.completionId && c.choice.index === choice.choice.index);
      if (!held) this.messagesAndChoices.push(choice);
    } else {
      this.messagesAndChoices.push(item);
    }
    return this;
  }

  /** Adds a line to `logs`. */
  log(line: string): this {
    this.logs.push(line);
    return this;
  }

  /** The sampled choices, in order. */
  choices(): SampledChoice[] {
    return this.messagesAndChoices.filter(isSampledChoice);
  }

  /**
   * The earliest trained-model step that sampled one of its turns (each recorded turn says its
   * step), or undefined when no turn says one: how far behind a pipeline's trainer it is.
   */
  oldestPolicyStep(): number | undefined {
    const steps = this.choices().flatMap((c) => (c.policyStep === undefined ? [] : [c.policyStep]));
    return steps.length ? Math.min(...steps) : undefined;
  }

  /** Completion tokens sampled in this trajectory. */
  sampledTokens(): number {
    return this.choices().reduce((n, c) => n + c.tokenIds.length, 0);
  }

  /** @internal The wire form; throws {@link BadTrajectoryError} naming `label` when it cannot be sent. */
  toWire(label = "trajectory"): TrajectoryWire {
    if (!Number.isFinite(this.reward)) throw new BadTrajectoryError(`${label}: reward is ${this.reward}; rewards must be finite numbers`);
    if (!this.messagesAndChoices.length) throw new BadTrajectoryError(`${label}: it has no messages`);
    for (const [key, value] of Object.entries(this.metrics)) {
      if (typeof value === "number" && !Number.isFinite(value)) throw new BadTrajectoryError(`${label}: metric ${key} is ${value}`);
    }
    return {
      messages_and_choices: this.messagesAndChoices.map((item) => isSampledChoice(item)
        ? { kind: "choice", message: assistantMessage(item) as unknown as Record<string, unknown>, prompt_token_ids: item.promptTokenIds,
          token_ids: item.tokenIds, logprobs: item.logprobs, finish_reason: item.choice.finish_reason ?? null,
          ...(item.provenance ? { art_provenance: item.provenance } : {}),
          ...(item.policyStep !== undefined ? { art_policy_step: item.policyStep } : {}),
          ...(item.sampling ? { art_sampling: samplingToWire(item.sampling) } : {}) }
        : (item as TrajectoryWire["messages_and_choices"][number])),
      ...(this.tools ? { tools: this.tools } : {}),
      reward: this.reward,
      metrics: this.metrics,
      metadata: this.metadata,
      logs: this.logs,
    };
  }
}

function assistantMessage(item: SampledChoice): MessageParam {
  return assistantMessageOf(item.choice.message);
}

/** A completion's message as the assistant message of the next request: content and tool calls, nothing else. */
export function assistantMessageOf(m: ChatCompletion["choices"][number]["message"]): MessageParam {
  return {
    role: "assistant",
    content: m.content ?? null,
    ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}),
  } as MessageParam;
}

/** One item of a group: a trajectory, a promise of one, or a function that starts one (lazily). */
export type TrajectorySource = Trajectory | Promise<Trajectory> | (() => Promise<Trajectory>);

/**
 * Trajectories that share a prompt or scenario: GRPO compares rewards within a group. Give it
 * functions (`() => rollout(...)`) so {@link gatherTrajectoryGroups} can run them under its
 * concurrency limit; promises already run.
 */
export class TrajectoryGroup {
  /** What it was made of: trajectories, promises, or functions that start a rollout. */
  readonly sources: TrajectorySource[];
  /** The finished trajectories (filled by gathering, or given directly). */
  trajectories: Trajectory[];
  /** Rollouts that threw, kept for inspection. */
  exceptions: unknown[] = [];
  /** What judging this group cost (set by {@link rulerScoreGroup} and `recordJudgeUsage`); sent with the step. */
  judgeUsage: JudgeUsage | undefined = undefined;

  constructor(items: Iterable<TrajectorySource>) {
    this.sources = [...items];
    this.trajectories = this.sources.filter((s): s is Trajectory => s instanceof Trajectory);
  }

  /** Mean reward of the finished trajectories. */
  meanReward(): number {
    return this.trajectories.length ? this.trajectories.reduce((s, t) => s + t.reward, 0) / this.trajectories.length : NaN;
  }

  /** True when every reward is the same: GRPO gets no gradient from such a group. */
  hasZeroVariance(): boolean {
    return this.trajectories.length > 0 && this.trajectories.every((t) => t.reward === this.trajectories[0]!.reward);
  }
}
