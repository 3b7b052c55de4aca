/**
 * RULER-style relative scoring: an LLM judge reads every trajectory of a group and scores each
 * from 0 to 1 against the others, with a rubric. Works with any OpenAI-compatible judge.
 * @module
 */
import type OpenAI from "openai";
import { z } from "zod";
import type { ChatModel } from "../client/chat-model";
import { ArtError, ModelCallError } from "../core/errors";
import { parseOptions } from "../core/options";
import type { MessageParam, TrajectoryGroup } from "../core/trajectory";
import { recordJudgeUsage } from "./judge-cost";

/** The judge's answer, validated: one score per trajectory, in the JSON shape the judge is asked for. */
export interface JudgeScores {
  /** One entry per trajectory. */
  scores: Array<{
    /** The trajectory's number in the judge's prompt, as a string (zod types it optional; a parsed reply always has it). */
    trajectory_id?: string;
    /** Why, in the judge's words ("" when it gave none). */
    explanation: string;
    /** 0 to 1, relative to the other trajectories of the group. */
    score: number;
  }>;
}

/** The zod schema that checks a judge's reply into {@link JudgeScores}. */
export const JudgeScores: z.ZodType<JudgeScores> = z.object({
  scores: z.array(z.object({
    trajectory_id: z.union([z.string(), z.number()]).transform(String),
    explanation: z.string().default(""),
    score: z.number().min(0).max(1),
  })),
});

/** The judge did not give one valid score per trajectory, even after a retry. */
export class JudgeOutputError extends ArtError {
  constructor(
    message: string,
    /** The judge's replies that could not be read. */
    readonly outputs: string[],
  ) {
    super(message);
  }
}

/** The default rubric: what a good trajectory is, when the caller gives none. */
export const DEFAULT_RUBRIC = [
  "A trajectory that achieves its goal scores higher than one that does not.",
  "Among trajectories that achieve the goal, the more efficient and correct one scores higher.",
  "Give partial credit for progress towards the goal.",
].join("\n");

/** Options of {@link rulerScoreGroup}. */
export interface RulerOptions {
  /** The judge: a {@link Model} (e.g. an OpenAI model) or a trained model. */
  judge: ChatModel;
  /** What makes a trajectory good (default {@link DEFAULT_RUBRIC}). */
  rubric?: string;
  /** Judge sampling temperature (default 0). */
  temperature?: number;
  /** Judge max tokens (default 1024). */
  maxTokens?: number;
  /**
   * Ask for the reply's JSON schema as `response_format` (default true): the art server enforces it
   * while sampling, so a small local judge writes valid scores too; OpenAI and vLLM take it as well.
   * Scores are then multiples of 0.1. Turn it off for a judge whose API refuses `response_format`.
   */
  structuredOutput?: boolean;
}

const RulerOptionsSchema = z.object({
  judge: z.custom<ChatModel>((v) => typeof (v as ChatModel)?.openai === "function" && typeof (v as ChatModel)?.inferenceName === "function",
    { message: "must be a model (new Model({...}) or a TrainableModel)" }),
  rubric: z.string().min(1).optional(),
  temperature: z.number().min(0).max(2).optional(),
  maxTokens: z.number().int().min(1).max(1_000_000).optional(),
  structuredOutput: z.boolean().optional(),
}).strict();

/** The reply's JSON schema for a group of `n`: n entries, ids 1..n, scores in steps of 0.1 (a bound a
 * small judge keeps only as a list of values). */
export function judgeReplyFormat(n: number): OpenAI.ResponseFormatJSONSchema {
  const entry = {
    type: "object", additionalProperties: false, required: ["trajectory_id", "explanation", "score"],
    properties: {
      trajectory_id: { enum: Array.from({ length: n }, (_, i) => String(i + 1)) },
      explanation: { type: "string", maxLength: 160 },
      score: { enum: Array.from({ length: 11 }, (_, i) => i / 10) },
    },
  };
  return { type: "json_schema", json_schema: { name: "ruler_scores", schema: {
    type: "object", additionalProperties: false, required: ["scores"],
    properties: { scores: { type: "array", minItems: n, maxItems: n, items: entry } },
  } } };
}

/** The judge's conversation for a group (exported so a judge can be taught it). */
export function judgeMessages(group: TrajectoryGroup, rubric: string = DEFAULT_RUBRIC): MessageParam[] {
  const transcripts = group.trajectories.map((t, i) => {
    const turns = t.messages().map((m) => `${m.role}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "")}`);
    return `<trajectory id="${i + 1}">\n${turns.join("\n")}\n</trajectory>`;
  });
  return [
    {
      role: "system",
      content: `You compare attempts at the same task and score each from 0 to 1, relative to the others.\nRubric:\n${rubric}\n` +
        `Reply with JSON only: {"scores": [{"trajectory_id": "1", "explanation": "...", "score": 0.5}, ...]}, one entry per trajectory.`,
    },
    { role: "user", content: transcripts.join("\n\n") },
  ];
}

/** What the judge is told when its reply was not usable. */
export function judgeRetryMessage(problem: string, n: number): string {
  return `That reply was not usable: ${problem}. Reply again with JSON only, exactly ${n} scores.`;
}

/** The first JSON object in a reply (judges like to wrap it in prose or code fences). */
export function parseJudgeReply(text: string): JudgeScores {
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  if (start < 0 || end <= start) throw new JudgeOutputError("no JSON object in the reply", [text]);
  let json: unknown;
  try {
    json = JSON.parse(text.slice(start, end + 1));
  } catch (error) {
    throw new JudgeOutputError(`the reply's JSON does not parse (${(error as Error).message})`, [text]);
  }
  const parsed = JudgeScores.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new JudgeOutputError(`the reply's JSON is not {"scores": [{"trajectory_id", "explanation", "score" 0..1}]} ` +
      `(${issue?.path.join(".") || "reply"}: ${issue?.message})`, [text]);
  }
  return parsed.data;
}

/**
 * Scores every trajectory of `group` with the judge: the score becomes the reward, the previous
 * reward is kept in `metrics.independentReward`, and the judge's explanation is added to `logs`.
 * When the reply is not valid or has the wrong number of scores, the judge is asked once more,
 * told what was wrong; a second failure throws {@link JudgeOutputError}. Every call's tokens (and
 * cost, for a judge with `pricing`) are added to `group.judgeUsage`, which the step records.
 */
export async function rulerScoreGroup(group: TrajectoryGroup, options: RulerOptions): Promise<TrajectoryGroup> {
  parseOptions("rulerScoreGroup", RulerOptionsSchema, options);
  const n = group.trajectories.length;
  if (n < 2) return group; // nothing to compare
  const messages = judgeMessages(group, options.rubric);
  const outputs: string[] = [];
  let problem = "";
  for (let attempt = 0; attempt < 2; attempt++) {
    let completion: OpenAI.Chat.Completions.ChatCompletion;
    try {
      completion = await options.judge.openai().chat.completions.create({
        model: options.judge.inferenceName(), messages, temperature: options.temperature ?? 0, max_tokens: options.maxTokens ?? 1024,
        ...(options.structuredOutput === false ? {} : { response_format: judgeReplyFormat(n) }),
      });
    } catch (error) {
      throw new ModelCallError(`rulerScoreGroup: the judge ${options.judge.inferenceName()} failed: ${(error as Error).message}`, { cause: error });
    }
    recordJudgeUsage(group, options.judge, completion.usage);
    const text = completion.choices[0]?.message.content ?? "";
    outputs.push(text);
    try {
      const parsed = parseJudgeReply(text);
      const ids = new Set(parsed.scores.map((s) => s.trajectory_id));
      if (parsed.scores.length !== n) throw new Error(`expected ${n} scores with trajectory_id 1..${n}, got ${parsed.scores.length}`);
      // n scores whose ids are not 1..n once each (a schema cannot say "each once"; small judges repeat
      // an id) are read in order, as the trajectories were shown.
      const inOrder = ![...Array(n).keys()].every((i) => ids.has(String(i + 1)));
      for (const [position, score] of parsed.scores.entries()) {
        const trajectory = group.trajectories[inOrder ? position : Number(score.trajectory_id) - 1]!;
        trajectory.metrics.independentReward = trajectory.reward;
        trajectory.reward = score.score;
        trajectory.log(`judge: ${score.score.toFixed(3)} ${score.explanation}`.trimEnd());
      }
      return group;
    } catch (error) {
      problem = (error as Error).message;
      messages.push({ role: "assistant", content: text }, { role: "user", content: judgeRetryMessage(problem, n) });
    }
  }
  throw new JudgeOutputError(`the judge gave no usable scores for ${n} trajectories after a retry (${problem}); ` +
    "try a stronger judge model or a shorter group", outputs);
}
