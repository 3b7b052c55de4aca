// The public API's contract without a server: camelCase names converted to and from the wire in
// one place (your metric names untouched), sampled choices as the trainer takes them, and every bad
// option a ConfigurationError naming the call, the option and the nearest name.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { metricNameToWire, metricsFromWire, sftConfigToWire, trainConfigToWire } from "../../../lib/core/convert";
import { checkTrainOptions } from "../../../lib/client/train-inputs";
import { nearestName } from "../../../lib/core/options";
import {
  ConfigurationError, LocalBackend, Model, RemoteBackend, retry, rulerScoreGroup, TrainableModel, Trajectory, TrajectoryGroup,
} from "../../../lib/index";

/** The ConfigurationError `run` throws (it must throw one). */
async function configurationError(run: () => unknown): Promise<string> {
  try {
    await run();
  } catch (error) {
    assert.ok(error instanceof ConfigurationError, `${(error as Error).name}: ${(error as Error).message}`);
    return error.message;
  }
  throw new Error("no ConfigurationError");
}

describe("names between the API and the wire", () => {
  it("renames the server's metrics to camelCase and leaves your metric names as you gave them", () => {
    const row = metricsFromWire({
      reward_std: 0.5, grad_norm: 1, tokenize_s: 0.1, groups_skipped_by_reason: { equal_rewards: 2 },
      illegal_moves: 0.25, myScore: 3, win: 1,
    });
    assert.deepEqual(row, { rewardStd: 0.5, gradNorm: 1, tokenizeSeconds: 0.1, groupsSkippedByReason: { equalRewards: 2 }, illegal_moves: 0.25, myScore: 3, win: 1 });
    assert.equal(metricNameToWire("rewardStd"), "reward_std");
    assert.equal(metricNameToWire("illegal_moves"), "illegal_moves");
    assert.equal(metricNameToWire("myScore"), "myScore");
  });

  it("sends the configs in snake_case, enum values included", () => {
    assert.deepEqual(trainConfigToWire({ learningRate: 1e-3, klCoef: 0.1, importanceSampling: "sequence", maxSequenceLength: 512,
      samplerCorrection: "none", samplerCorrectionCap: 3, lengthNormalization: "constant", normalizationTokens: 256, klRefStep: 2 }),
    { learning_rate: 1e-3, kl_coef: 0.1, importance_sampling: "sequence", max_sequence_length: 512, sampler_correction: "none",
      sampler_correction_cap: 3, length_normalization: "constant", normalization_tokens: 256, kl_ref_step: 2 });
    assert.deepEqual(sftConfigToWire({ batchSize: 4, trainOn: "lastAssistant", warmupRatio: 0 }),
      { batch_size: 4, train_on: "last_assistant", warmup_ratio: 0 });
  });
});

describe("sampled choices", () => {
  const completion = (logprob: number | null) => ({
    id: "c", object: "chat.completion", created: 0, model: "m", prompt_token_ids: [1, 2],
    choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "hi", refusal: null },
      token_ids: [7], logprobs: { content: [{ token: "hi", logprob, bytes: [], top_logprobs: [] }] }, art_provenance: "art1:f:s:sig" }],
  }) as never;

  it("keep the server's provenance tag and send it back when training", () => {
    const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }] }).push(completion(-0.5));
    const wire = t.toWire().messages_and_choices[1] as Record<string, unknown>;
    assert.equal(wire.art_provenance, "art1:f:s:sig");
    assert.deepEqual([wire.token_ids, wire.logprobs], [[7], [-0.5]]);
  });

  it("keep the sampling parameters the server recorded, camelCase in the API, and send them back", () => {
    const sampled = completion(-0.5) as unknown as { choices: Record<string, unknown>[] };
    sampled.choices[0]!.art_sampling = { temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05, constrained: true, engine: "hf" };
    const t = new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }] }).push(sampled as never);
    assert.deepEqual(t.choices()[0]!.sampling, { temperature: 0.7, topP: 0.9, topK: 20, minP: 0.05, constrained: true, engine: "hf" });
    const wire = t.toWire().messages_and_choices[1] as Record<string, unknown>;
    assert.deepEqual(wire.art_sampling, { temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05, constrained: true, engine: "hf" });
    // A server from before min-p and constraints were recorded: neither, sent back as such.
    const older = completion(-0.5) as unknown as { choices: Record<string, unknown>[] };
    older.choices[0]!.art_sampling = { temperature: 1, top_p: 1, top_k: 0, engine: "vllm" };
    const o = new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }] }).push(older as never);
    assert.deepEqual(o.choices()[0]!.sampling, { temperature: 1, topP: 1, topK: 0, minP: 0, constrained: false, engine: "vllm" });
  });

  it("without finite logprobs say so, not that token ids are missing", () => {
    assert.throws(() => new Trajectory().push(completion(null)), /has 1 token ids but logprobs that are not all finite numbers/);
  });
});

describe("options", () => {
  it("an unknown option names the call and the nearest valid name", async () => {
    assert.equal(nearestName("learning_rate", ["learningRate", "loss"]), "learningRate");
    assert.equal(nearestName("concurency", ["concurrency", "progress"]), "concurrency");
    assert.equal(nearestName("zzz", ["concurrency", "progress"]), undefined);
    assert.equal(nearestName("KL_COEF", ["klCoef", "loss"]), "klCoef");
    assert.equal(nearestName("steps", ["rlSteps", "loss"]), "rlSteps");
    assert.match(await configurationError(() => checkTrainOptions("model.train", { kl_coef: 0.1 })),
      /^model\.train: unknown option `kl_coef`; did you mean `klCoef`\?/);
    assert.match(await configurationError(() => new TrainableModel({ name: "a", project: "b", lora: { target_modules: ["q_proj"] } } as never)),
      /^new TrainableModel: unknown option `lora\.target_modules`; did you mean `targetModules`\? \(valid: r, alpha, dropout, targetModules\)$/);
    assert.match(await configurationError(() => retry(async () => 1, { attempt: 2 } as never)), /^retry: unknown option `attempt`; did you mean `attempts`\?/);
  });

  it("numbers are range-checked and types checked, every problem in one line", async () => {
    const message = await configurationError(() => checkTrainOptions("model.train", { learningRate: 0, microBatchSize: 2.5, temperature: Infinity, loss: "dpo" }));
    assert.equal(message.split("\n").length, 1);
    for (const part of ["option `learningRate` must be > 0 (got 0)", "option `microBatchSize` must be an integer (got 2.5)",
      "option `temperature` must be a finite number (got Infinity)", 'option `loss` must be one of "ppo", "cispo" (got "dpo")']) {
      assert.ok(message.includes(part), `${part} not in: ${message}`);
    }
    assert.match(await configurationError(() => new TrainableModel({ name: "has space", project: "p" })), /option `name` must be 1-64 letters/);
    assert.match(await configurationError(() => new TrainableModel({ name: "a", project: "p", gpuCostPerHourUsd: -1 })),
      /option `gpuCostPerHourUsd` must be >= 0 \(got -1\)/);
    assert.match(await configurationError(() => new RemoteBackend({ url: "localhost:8000", token: "t" })), /option `url` must be an http\(s\) URL/);
    assert.match(await configurationError(() => new Model({ name: "" })), /^new Model: option `name` must not be empty/);
    assert.match(await configurationError(() => LocalBackend.start({ startupTimeoutMs: 5 })), /option `startupTimeoutMs` must be >= 1000 \(got 5\)/);
    assert.match(await configurationError(() => rulerScoreGroup(new TrajectoryGroup([]), { judge: "gpt" as never })), /option `judge` must be a model/);
    assert.match(await configurationError(() => checkTrainOptions("model.train", "fast")), /^model\.train: options must be an object \(got "fast"\)$/);
  });
});
