// `npm run bench:serve -- --engines hf,vllm`: the engines side by side in one run, each behind its
// own gpu-server, all started first and then measured in turns (engine after engine, level after
// level, round after round), so the machine's drift falls on all of them alike:
// - generated tokens/s at each concurrency (median round), through the official `openai` client;
// - time to the first streamed token, alone and with 8 requests arriving together;
// - the LoRA hot-load: the `reloadSeconds` of a one-example SFT step (the new adapter loaded into
//   the engine), and the first answer from the new step;
// - the peak resident memory of each server with everything it started (vLLM's processes too), and
//   the CPU each used while the others were measured (an idle engine that polls takes cores away).
// An entry is `hf`, `vllm`, or a variant to tune vLLM: `vllm:<flags for vLLM> <NAME=value env>`, e.g.
//   npm run bench:serve -- --engines "hf,vllm,vllm:--max-num-seqs=16,vllm:VLLM_CPU_OMP_THREADS_BIND=nobind"
// Raw data: .artifacts/bench/serve-engines.json
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { MESSAGES, median, runRound, startServer, summarize, treeUsage, type Round } from "./serve-common";

export interface CompareOptions {
  engines: string[];
  model: string;
  dtype: string;
  maxTokens: number;
  levels: number[];
  rounds: number;
  outDir: string;
}

interface Entry {
  label: string;
  engine: string;
  vllmArgs: string;
  env: Record<string, string>;
}

/** `vllm:--max-num-seqs=16 VLLM_CPU_OMP_THREADS_BIND=nobind` -> engine, vLLM flags, environment. */
export function parseEntry(text: string): Entry {
  const [engine, ...rest] = text.split(":");
  const words = rest.join(":").split(/\s+/).filter(Boolean);
  const env = Object.fromEntries(words.filter((w) => /^[A-Z][A-Z0-9_]*=/.test(w)).map((w) => [w.slice(0, w.indexOf("=")), w.slice(w.indexOf("=") + 1)]));
  const vllmArgs = words.filter((w) => !/^[A-Z][A-Z0-9_]*=/.test(w)).join(" ");
  if (engine !== "hf" && engine !== "vllm") throw new Error(`unknown engine ${JSON.stringify(engine)} in --engines (hf or vllm)`);
  if (engine === "hf" && (vllmArgs || Object.keys(env).length)) throw new Error(`${text}: settings after ':' are for vllm entries`);
  return { label: text, engine, vllmArgs, env };
}

/** Milliseconds to the first streamed chunk that carries text, for each of `n` requests sent together. */
async function firstTokenMs(client: OpenAI, model: string, maxTokens: number, n: number, seed: number): Promise<number[]> {
  return Promise.all(Array.from({ length: n }, async (_, i) => {
    const t0 = performance.now();
    const stream = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: maxTokens, seed: seed + i, stream: true });
    let first = NaN;
    for await (const chunk of stream) {
      if (Number.isNaN(first) && chunk.choices[0]?.delta?.content) first = performance.now() - t0;
    }
    return first;
  }));
}

type Server = Awaited<ReturnType<typeof startServer>>;

/** One SFT step of one example on a fresh model: the server's reload time, and the first answer from the new step. */
async function hotLoad(server: Server, client: OpenAI, model: string, step: number) {
  const conversations = [{ messages: [...MESSAGES, { role: "assistant", content: "B2" }] }];
  const lines = (await server.post("/v1/art/models/hot/train_sft", { conversations, config: { epochs: 1 } })).trim().split("\n");
  const result = JSON.parse(lines[lines.length - 1]!) as { metrics: { reload_s: number } };
  const t0 = performance.now();
  await client.chat.completions.create({ model: `hot@${step}`, messages: MESSAGES, max_tokens: 1 });
  return { reloadSeconds: result.metrics.reload_s, firstAnswerMs: performance.now() - t0 };
}

export async function compareEngines(options: CompareOptions): Promise<void> {
  const entries = options.engines.map(parseEntry);
  const servers: { entry: Entry; server: Server; client: OpenAI; startupSeconds: number }[] = [];
  const peakRss = new Map<string, number>();
  const busyElsewhere = new Map<string, { cpuSeconds: number; wallSeconds: number }>(entries.map((e) => [e.label, { cpuSeconds: 0, wallSeconds: 0 }]));
  const watcher = setInterval(() => {
    for (const s of servers) peakRss.set(s.entry.label, Math.max(peakRss.get(s.entry.label) ?? 0, treeUsage(s.server.pid).rssBytes));
  }, 500);
  try {
    for (const entry of entries) {
      const t0 = performance.now();
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-engines-"));
      // `=`: a separate value starting with "-" would be taken for a flag of the server's own.
      const args = ["--engine", entry.engine, ...(entry.vllmArgs ? [`--vllm-args=${entry.vllmArgs}`] : [])];
      const server = await startServer({ model: options.model, dtype: options.dtype, dataDir, args, env: entry.env });
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.token, maxRetries: 0, timeout: 600_000 });
      servers.push({ entry, server, client, startupSeconds: (performance.now() - t0) / 1000 });
      console.log(`[bench] ${entry.label}: serving after ${servers.at(-1)!.startupSeconds.toFixed(1)} s`);
      await runRound(client, options.model, options.maxTokens, 4, 16, 10_000); // warm-up
    }
    const rounds = new Map<string, Round[]>();
    const ttft = new Map<string, { alone: number[]; together: number[] }>(entries.map((e) => [e.label, { alone: [], together: [] }]));
    /** Runs `work` on one server, charging the others' CPU in that time to their idle cost. */
    const measured = async <T>(label: string, work: () => Promise<T>): Promise<T> => {
      const others = servers.filter((s) => s.entry.label !== label);
      const before = others.map((s) => treeUsage(s.server.pid).cpuSeconds);
      const t0 = performance.now();
      const out = await work();
      const wall = (performance.now() - t0) / 1000;
      others.forEach((s, i) => {
        const b = busyElsewhere.get(s.entry.label)!;
        b.cpuSeconds += treeUsage(s.server.pid).cpuSeconds - before[i]!;
        b.wallSeconds += wall;
      });
      return out;
    };
    for (let round = 0; round < options.rounds; round++) {
      for (const s of round % 2 ? [...servers].reverse() : servers) {
        const label = s.entry.label;
        for (const level of round % 2 ? [...options.levels].reverse() : options.levels) {
          const requests = level === 1 ? 12 : Math.max(48, 2 * level);
          const r = await measured(label, () => runRound(s.client, options.model, options.maxTokens, level, requests, round * 1000));
          rounds.set(`${label}|${level}`, [...(rounds.get(`${label}|${level}`) ?? []), r]);
          console.log(`[bench] round ${round + 1}/${options.rounds} ${label} c=${level}: ${r.tokensPerSecond.toFixed(0)} tokens/s` +
            (r.errors ? `, ${r.errors} errors: ${r.errorMessages[0]}` : ""));
        }
        const t = ttft.get(label)!;
        for (let i = 0; i < 4; i++) t.alone.push(...await measured(label, () => firstTokenMs(s.client, options.model, options.maxTokens, 1, 500 + round * 10 + i)));
        t.together.push(...await measured(label, () => firstTokenMs(s.client, options.model, options.maxTokens, 8, 700 + round * 10)));
      }
    }
    const hot = new Map<string, { reloadSeconds: number; firstAnswerMs: number }[]>();
    for (const s of servers) {
      await s.server.post("/v1/art/models/register", { name: "hot", project: "bench", base_model: options.model });
      const runs = [];
      for (let step = 1; step <= 3; step++) runs.push(await measured(s.entry.label, () => hotLoad(s.server, s.client, options.model, step)));
      hot.set(s.entry.label, runs);
    }
    const rows = servers.map((s) => {
      const label = s.entry.label;
      const busy = busyElsewhere.get(label)!;
      return {
        label, engine: s.entry.engine, vllmArgs: s.entry.vllmArgs, env: s.entry.env, startupSeconds: s.startupSeconds,
        levels: options.levels.map((level) => summarize(level, rounds.get(`${label}|${level}`) ?? [])),
        ttftAloneMs: median(ttft.get(label)!.alone), ttftTogetherMs: median(ttft.get(label)!.together),
        hotLoad: hot.get(label)!, reloadSeconds: median(hot.get(label)!.map((h) => h.reloadSeconds)),
        firstAnswerAfterLoadMs: median(hot.get(label)!.map((h) => h.firstAnswerMs)),
        peakRssBytes: peakRss.get(label) ?? NaN, cpuWhileOthersMeasured: busy.cpuSeconds / Math.max(1e-9, busy.wallSeconds),
      };
    });
    console.log(`\nEngines side by side: ${options.model}, dtype ${options.dtype}, max_tokens ${options.maxTokens}, ` +
      `${options.rounds} interleaved rounds, ${os.cpus().length} CPUs\n`);
    console.log(`| engine | start | ${options.levels.map((l) => `tokens/s c=${l}`).join(" | ")} | first token alone | first token, 8 together | ` +
      "LoRA hot-load | first answer after | peak memory | CPU while idle |");
    console.log(`| --- | ---: | ${options.levels.map(() => "---:").join(" | ")} | ---: | ---: | ---: | ---: | ---: | ---: |`);
    for (const r of rows) {
      console.log(`| ${r.label} | ${r.startupSeconds.toFixed(0)} s | ${r.levels.map((l) => l.tokensPerSecond.toFixed(0)).join(" | ")} | ` +
        `${r.ttftAloneMs.toFixed(0)} ms | ${r.ttftTogetherMs.toFixed(0)} ms | ${r.reloadSeconds.toFixed(2)} s | ${r.firstAnswerAfterLoadMs.toFixed(0)} ms | ` +
        `${(r.peakRssBytes / 2 ** 30).toFixed(2)} GiB | ${(r.cpuWhileOthersMeasured * 100).toFixed(0)}% of a core |`);
    }
    const out = path.join(options.outDir, "serve-engines.json");
    fs.writeFileSync(out, JSON.stringify({ model: options.model, dtype: options.dtype, maxTokens: options.maxTokens, rounds: options.rounds, rows }, null, 2));
    console.log(`raw data: ${path.relative(process.cwd(), out)}`);
  } finally {
    clearInterval(watcher);
    for (const s of servers) s.server.stop();
  }
}
