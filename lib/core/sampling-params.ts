/**
 * The sampling parameters a sampled choice carries (trajectory.ts), as the server recorded them.
 * @module
 */
/** The sampling parameters a turn was drawn with, as the server recorded them. */
export interface SamplingParams {
  /** The temperature (0: greedy). */
  readonly temperature: number;
  /** Nucleus sampling's kept mass (1: off). */
  readonly topP: number;
  /** Top-k (0: off). */
  readonly topK: number;
  /** Min-p: tokens below this share of the likeliest token's probability were dropped (0: off). */
  readonly minP: number;
  /**
   * True when `response_format` constrained it (a JSON schema enforced token by token): the trainer
   * refuses such turns unless `allowConstrainedChoices` is set.
   */
  readonly constrained: boolean;
  /** The engine that sampled it ("hf" or "vllm"). */
  readonly engine: string;
}
