// The base model's decode speed on a server where models have trained, against a fresh server, in
// one run (`npm run bench:serve -- --after-training`). Three servers at once: a fresh one, one where
// 4 models each trained 3 GRPO steps, and the same training with PEFT's own adapter switches
// (ART_ADAPTER_SWITCH=peft, the engine before core/adapter_switch.py). Rounds take turns between
// the servers, so the machine's drift hits all three alike; tokens/s is the median round, "vs fresh"
// the median of the per-round ratios to the fresh server. Also the
// trained model's latest step (`name@3`), served on the trained servers.
//
// Prints a table and writes .artifacts/bench/serve-after-training.json.
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, Trajectory, TrajectoryGroup } from "../lib";
import { MESSAGES, median, ROOT, runRound, type Round } from "./serve-common";

const MODELS = 4;
const STEPS = 3;

interface Options {
  model: string;
  dtype: string;
  maxTokens: number;
  levels: number[];
  rounds: number;
  outDir: string;
}

async function trainModels(backend: LocalBackend, baseModel: string): Promise<TrainableModel[]> {
  const models: TrainableModel[] = [];
  for (let m = 0; m < MODELS; m++) {
    const model = new TrainableModel({ name: `after-${m}`, project: "bench-after-training", baseModel });
    await model.register(backend);
    const rollout = async () => {
      const t = new Trajectory({ messagesAndChoices: [...MESSAGES] });
      const c = await model.openai().chat.completions.create({ model: model.inferenceName(), messages: t.messages(), max_tokens: 6 });
      t.push(c);
      t.reward = /B2/.test(c.choices[0]?.message.content ?? "") ? 1 : Math.random(); // any spread trains
      return t;
    };
    for (let s = 0; s < STEPS; s++) {
      const groups = [0, 1].map(() => new TrajectoryGroup(Array.from({ length: 4 }, () => rollout)));
      await model.train(await gatherTrajectoryGroups(groups, { progress: false }), { learningRate: 1e-4 });
    }
    models.push(model);
  }
  return models;
}

export async function afterTraining(options: Options): Promise<void> {
  const dataRoot = path.join(options.outDir, "data-after-training");
  fs.rmSync(dataRoot, { recursive: true, force: true }); // every run trains its models from step 0
  const start = (name: string, env: Record<string, string> = {}) => LocalBackend.start({
    baseModel: options.model, dataDir: path.join(dataRoot, name),
    args: ["--dtype", options.dtype, "--log-level", "warning"], env,
  });
  const servers = [
    { label: "fresh (nothing trained)", backend: await start("fresh") },
    { label: "4 models x 3 steps trained", backend: await start("trained") },
    { label: "4 models x 3 steps, PEFT's switches", backend: await start("trained-peft", { ART_ADAPTER_SWITCH: "peft" }) },
  ];
  try {
    const started = performance.now();
    const trained = new Map<number, TrainableModel[]>();
    for (const i of [1, 2]) trained.set(i, await trainModels(servers[i]!.backend, options.model));
    console.log(`trained ${MODELS} models x ${STEPS} steps on two servers in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    const clients = servers.map((s) => new OpenAI({ baseURL: `${s.backend.url}/v1`, apiKey: s.backend.token, maxRetries: 0, timeout: 300_000 }));
    const targets = [
      ...servers.map((s, i) => ({ label: s.label, served: "base model", server: i, model: options.model })),
      ...[1, 2].map((i) => ({ label: servers[i]!.label, served: `after-0@${STEPS}`, server: i, model: trained.get(i)![0]!.inferenceName(STEPS) })),
    ];
    const rounds = new Map<string, Round[]>();
    for (const t of targets) await runRound(clients[t.server]!, t.model, options.maxTokens, 2, 4, 0); // warm-up
    for (let round = 0; round < options.rounds; round++) {
      for (const level of options.levels) {
        for (const t of round % 2 ? [...targets].reverse() : targets) {
          const key = `${t.label}|${t.served}|${level}`;
          const requests = level === 1 ? 12 : 2 * level;
          rounds.set(key, [...(rounds.get(key) ?? []), await runRound(clients[t.server]!, t.model, options.maxTokens, level, requests, round * 1000)]);
        }
      }
    }
    console.log(`\nDecode after training: ${options.model}, dtype ${options.dtype}, max_tokens ${options.maxTokens}, ${options.rounds} rounds taking turns, ` +
      "tokens/s of the median round, vs fresh the median of the per-round ratios\n");
    console.log(`| server | model served | ${options.levels.map((l) => `tokens/s c=${l}`).join(" | ")} | ${options.levels.map((l) => `vs fresh c=${l}`).join(" | ")} |`);
    console.log(`| --- | --- |${" ---: |".repeat(options.levels.length * 2)}`);
    const rates = (t: { label: string; served: string }, level: number) => rounds.get(`${t.label}|${t.served}|${level}`)!.map((r) => r.tokensPerSecond);
    // Against the fresh server round by round: a round of each runs back to back, so the pair shares
    // the machine's drift (±20% over tens of seconds here), which a ratio of two medians does not.
    const ratios = (t: { label: string; served: string }, level: number) => {
      const fresh = rates(targets[0]!, level);
      return rates(t, level).map((x, i) => x / fresh[i]!);
    };
    const rows = targets.map((t) => ({ ...t, tokensPerSecond: options.levels.map((l) => median(rates(t, l))),
      vsFresh: options.levels.map((l) => median(ratios(t, l))),
      vsFreshByRound: options.levels.map((l) => ratios(t, l)),
      errors: options.levels.reduce((n, l) => n + rounds.get(`${t.label}|${t.served}|${l}`)!.reduce((e, r) => e + r.errors, 0), 0) }));
    for (const r of rows) {
      console.log(`| ${r.label} | ${r.served} | ${r.tokensPerSecond.map((x) => x.toFixed(1)).join(" | ")} | ${r.vsFresh.map((x) => `${x.toFixed(2)}x`).join(" | ")} |` +
        (r.errors ? ` (${r.errors} errors)` : ""));
    }
    const out = path.join(options.outDir, "serve-after-training.json");
    fs.writeFileSync(out, JSON.stringify({ ...options, models: MODELS, steps: STEPS, rows, rounds: Object.fromEntries(rounds) }, null, 2));
    console.log(`raw data: ${path.relative(ROOT, out)}`);
  } finally {
    await Promise.all(servers.map((s) => s.backend.close()));
  }
}
