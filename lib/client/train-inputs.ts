/**
 * What `TrainableModel`'s training calls take: their options (checked with zod before anything is
 * sent), SFT's conversations (or a JSONL file of them), and trajectory groups turned into the wire's
 * groups with an error that names the group and trajectory at fault.
 * @module
 */
import fs from "node:fs";
import { z } from "zod";
import { type GrpoConfig, GrpoConfigSchema, type SftConfig, SftConfigSchema } from "../core/config";
import { BadTrajectoryError } from "../core/errors";
import { functionOption, parseOptions } from "../core/options";
import type { TrainEvent } from "../core/results";
import type { MessageParam, ToolParam, Trajectory, TrajectoryGroup } from "../core/trajectory";
import { SplitMetricSchema } from "./best-step";

/** A conversation to learn from with SFT. */
export interface Conversation {
  /** The messages, ending with the assistant turn(s) to learn. */
  messages: MessageParam[];
  /** The tools offered in it (OpenAI tool definitions). */
  tools?: ToolParam[];
}

export function readJsonl(file: string): Conversation[] {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    throw new BadTrajectoryError(`model.trainSft: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  return text.split("\n").filter((l) => l.trim()).map((line, i) => {
    try {
      return JSON.parse(line) as Conversation;
    } catch (error) {
      throw new BadTrajectoryError(`${file}, line ${i + 1}: not JSON (${(error as Error).message})`);
    }
  });
}

/** Options of {@link TrainableModel.train} beyond the GRPO config. */
export interface TrainOptions extends GrpoConfig {
  /** Keep serving the previous step while this one trains (default: requests wait for the new one). */
  servePreviousDuringTraining?: boolean;
  /** Show a progress line (default true). */
  progress?: boolean;
  /** Each line the server streams (start, progress, warnings, result). */
  onEvent?: (event: TrainEvent) => void;
  /**
   * Stops the step: the request ends with a {@link StoppedError} once the server has finished it
   * (rolled back, unless it had already committed; the message says which).
   */
  signal?: AbortSignal;
  /** How many groups a pipeline dropped or gathered again as stale before this step (recorded in the step's metrics). */
  staleGroupCounts?: StaleGroupCounts;
  /** How fast this step's rollouts sampled (recorded as `samplingTokensPerSecond`; `trainLoop` measures it). */
  sampling?: SamplingThroughput;
}

/** The completion tokens a step's rollouts sampled, and the wall seconds their gathering took. */
export interface SamplingThroughput {
  /** Completion tokens sampled. */
  tokens: number;
  /** Wall seconds from the first rollout's start to the last one's end. */
  seconds: number;
}

/** Groups a pipeline left out or gathered again before a step for being too far behind. */
export interface StaleGroupCounts {
  /** Groups dropped. */
  dropped: number;
  /** Groups gathered again. */
  retried: number;
}

export const TrainOptionsSchema = GrpoConfigSchema.extend({
  servePreviousDuringTraining: z.boolean().optional(),
  progress: z.boolean().optional(),
  onEvent: functionOption<(event: TrainEvent) => void>().optional(),
  signal: z.instanceof(AbortSignal, { message: "must be an AbortSignal" }).optional(),
  staleGroupCounts: z.object({ dropped: z.number().int().min(0), retried: z.number().int().min(0) }).strict().optional(),
  sampling: z.object({ tokens: z.number().int().min(0), seconds: z.number().min(0).finite() }).strict().optional(),
}).strict();

/** Checks the options of `model.train` for `call` (e.g. a loop that passes them on later). */
export function checkTrainOptions(call: string, options: unknown): TrainOptions {
  return parseOptions(call, TrainOptionsSchema, options);
}

/** Options of {@link TrainableModel.trainSft} beyond the SFT config. */
export interface TrainSftOptions extends SftConfig {
  /** Show a progress line (default true). */
  progress?: boolean;
  /** Each line the server streams. */
  onEvent?: (event: TrainEvent) => void;
}

export const TrainSftOptionsSchema = SftConfigSchema.extend({
  progress: z.boolean().optional(),
  onEvent: functionOption<(event: TrainEvent) => void>().optional(),
}).strict();

export const LogOptionsSchema = z.object({
  split: z.string().regex(/^[A-Za-z0-9 _.-]{1,64}$/, "must be 1-64 letters, digits, spaces, '.', '_' or '-'").optional(),
  step: z.number().int().min(0).optional(),
}).strict();
export const DeleteCheckpointsOptionsSchema = z.object({
  keepBestBy: SplitMetricSchema.optional(),
}).strict();

/** The wire groups, validated: names the group and trajectory at fault. `need`: what each trajectory must hold to train (a log needs nothing). */
export function toWireGroups(groups: TrajectoryGroup[], need: "sampled" | "or plain assistant messages" | false) {
  if (!Array.isArray(groups)) throw new BadTrajectoryError("expected an array of TrajectoryGroup (e.g. the result of gatherTrajectoryGroups)");
  if (!groups.length) throw new BadTrajectoryError("no groups to send: gather some rollouts first");
  return groups.map((group, g) => {
    if (!Array.isArray(group?.trajectories)) throw new BadTrajectoryError(`group ${g} is not a TrajectoryGroup`);
    if (!group.trajectories.length) {
      throw new BadTrajectoryError(`group ${g} has no finished trajectories${group.exceptions.length ? ` (${group.exceptions.length} rollouts threw)` : ""}`);
    }
    // A trajectory that cannot train (its agent never sampled) still counts in its group's baseline:
    // its reward is sent, and the others' advantages are taken against it. A group of nothing but
    // such trajectories is a mistake (completions not pushed): refused, naming the first.
    const trains = (t: Trajectory) => t.choices().length > 0 ||
      (need === "or plain assistant messages" && t.messages().some((m) => m.role === "assistant"));
    if (need && !group.trajectories.some(trains)) {
      const t = group.trajectories[0]!;
      const answered = t.messages().some((m) => m.role === "assistant");
      throw new BadTrajectoryError(`group ${g}, trajectory 0 has no sampled choices (nor has any other of its group): push the completions from model.openai() into it` +
        (answered && need === "sampled" ? ", or train its plain assistant messages with allowTrainingWithoutLogprobs: true (scored by the policy at the step's start)" : ""));
    }
    return group.trajectories.map((t, i) => t.toWire(`group ${g}, trajectory ${i}`));
  });
}
