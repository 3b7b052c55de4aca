/**
 * What rollout code needs of any model (`ChatModel`), and `Model`: one that is only called, e.g. an
 * OpenAI model as a baseline or a judge. `TrainableModel` (model.ts) is the other kind.
 * @module
 */
import OpenAI from "openai";
import { z } from "zod";
import { recordingFetch } from "../capture/recording-fetch";
import { runRollout } from "../capture/rollout-context";
import { ConfigurationError } from "../core/errors";
import type { TokenPricing } from "../core/judge-usage";
import { httpUrlOption, parseOptions } from "../core/options";
import type { Trajectory, TrajectoryInit } from "../core/trajectory";

/** What rollout code needs of any model. */
export interface ChatModel {
  /** The model name to send in requests. */
  inferenceName(step?: number): string;
  /** An OpenAI client for it (its calls are recorded inside {@link ChatModel.rollout}). */
  openai(): OpenAI;
  /** The OpenAI-compatible base URL, ending in `/v1`, for frameworks that take one. */
  readonly baseURL: string;
  /** The API key (bearer token) for that URL. */
  readonly apiKey: string;
  /**
   * The fetch to give a framework with the base URL: inside `rollout` it records every chat
   * completion into the rollout's trajectory (on a TrainableModel with token ids and logprobs).
   */
  readonly fetch: typeof fetch;
  /**
   * Runs agent code in a rollout: every chat completion sent through this model's `fetch` or
   * `openai()` client while `fn` runs (in its async calls, not in parallel rollouts) is recorded
   * into a new trajectory, which it resolves with. Set `t.reward` (and metrics) in `fn`.
   */
  rollout(fn: (trajectory: Trajectory) => unknown, init?: TrajectoryInit): Promise<Trajectory>;
  /** Its price per million tokens, when it is a judge whose calls should be priced ({@link Model}'s option). */
  readonly pricing?: TokenPricing;
}

/** Options of a plain {@link Model}. */
export interface ModelOptions {
  /** The model id the endpoint knows (e.g. `gpt-4.1-mini`). */
  name: string;
  /** An OpenAI-compatible endpoint (default: OpenAI's). */
  baseURL?: string;
  /** Its API key. */
  apiKey?: string;
  /**
   * Its price per million tokens (US dollars): as a judge ({@link rulerScoreGroup}), its calls are
   * then priced from their token usage and each step records `judgeCostUsd`.
   */
  pricing?: TokenPricing;
}

const perMillion = z.number().finite().min(0).max(100_000);
const ModelOptionsSchema = z.object({
  name: z.string().min(1),
  baseURL: httpUrlOption.optional(),
  apiKey: z.string().optional(),
  pricing: z.object({ inputPerMillionUsd: perMillion, outputPerMillionUsd: perMillion }).strict().optional(),
}).strict();

/**
 * A model that is not trained here: OpenAI, or any OpenAI-compatible endpoint, as a baseline.
 * `Model.fromEnv()` reads `ART_BASELINE_MODEL`, `ART_BASELINE_BASE_URL` and `ART_BASELINE_API_KEY`
 * (falling back to `OPENAI_API_KEY`).
 */
export class Model implements ChatModel {
  /** The model name sent with each request. */
  readonly name: string;
  readonly baseURL: string;
  readonly apiKey: string;
  /** Records calls inside {@link Model.rollout} as plain assistant messages (another endpoint returns no token ids). */
  readonly fetch: typeof fetch;
  /** Its price per million tokens, if given. */
  readonly pricing: TokenPricing | undefined;
  private readonly client: OpenAI;

  constructor(options: ModelOptions) {
    parseOptions("new Model", ModelOptionsSchema, options);
    this.name = options.name;
    this.pricing = options.pricing;
    this.baseURL = (options.baseURL ?? "https://api.openai.com/v1").replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? process.env.OPENAI_API_KEY ?? "unset";
    this.fetch = recordingFetch({ owner: this, label: this.name, askForTokens: false });
    this.client = new OpenAI({ apiKey: this.apiKey, baseURL: this.baseURL, fetch: this.fetch });
  }

  /**
   * The model configured by `<prefix>_MODEL`, `<prefix>_BASE_URL` and `<prefix>_API_KEY` (default
   * prefix `ART_BASELINE`; the cookbook also reads `ART_GENERATOR` and `ART_JUDGE`), or null when
   * `<prefix>_MODEL` is unset.
   */
  static fromEnv(prefix = "ART_BASELINE", env: NodeJS.ProcessEnv = process.env): Model | null {
    if (!/^[A-Z][A-Z0-9_]*$/.test(prefix)) throw new ConfigurationError(`Model.fromEnv: prefix ${JSON.stringify(prefix)} is not an environment variable name (e.g. "ART_JUDGE")`);
    const name = env[`${prefix}_MODEL`];
    if (!name) return null;
    return new Model({ name, baseURL: env[`${prefix}_BASE_URL`] || undefined, apiKey: env[`${prefix}_API_KEY`] || undefined });
  }

  inferenceName(): string {
    return this.name;
  }

  openai(): OpenAI {
    return this.client;
  }

  rollout(fn: (trajectory: Trajectory) => unknown, init?: TrajectoryInit): Promise<Trajectory> {
    return runRollout(this, fn, init);
  }
}
