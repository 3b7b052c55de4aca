/**
 * Hugging Face Hub: push a trained step as a PEFT adapter repository (with a generated model
 * card), and download a base model snapshot into the local cache the server loads from.
 * Uses `@huggingface/hub`; `hubUrl` points it at another Hub-compatible server.
 * @module
 */
import { z } from "zod";
import type { TrainableModel } from "../client/model";
import { ConfigurationError, HubError, ServerApiError, ServerUnreachableError } from "../core/errors";
import { httpUrlOption, parseOptions } from "../core/options";
import type { HistoryRow } from "../core/results";

/** Options of {@link pushToHub}. */
export interface PushToHubOptions {
  /** `user/name` or `org/name`. */
  repo: string;
  /** The step to push (default: the latest). */
  step?: number;
  /** A Hub token with write access (default `HF_TOKEN`). */
  token?: string;
  /** Another Hub endpoint (default https://huggingface.co). */
  hubUrl?: string;
  /** Create the repository as private (default true). */
  private?: boolean;
}

const PushToHubOptionsSchema = z.object({
  repo: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/, "must be `user/name` or `org/name`"),
  step: z.number().int().min(0).optional(),
  token: z.string().min(1).optional(),
  hubUrl: httpUrlOption.optional(),
  private: z.boolean().optional(),
}).strict();

const DownloadFromHubOptionsSchema = z.object({
  revision: z.string().min(1).optional(),
  cacheDir: z.string().min(1).optional(),
  token: z.string().min(1).optional(),
  hubUrl: httpUrlOption.optional(),
}).strict();

/** Runs a Hub call; its failures become a {@link HubError} that says what was being done. */
async function onHub<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw new HubError(`${what}: ${(error as Error)?.message ?? String(error)}`, { cause: error });
  }
}

/** The model card of a pushed adapter. */
export function modelCard(model: TrainableModel, step: number, history: HistoryRow[]): string {
  const rows = history.filter((r) => typeof r.reward === "number" && r.step < step);
  const last = rows[rows.length - 1];
  const lines = [
    "---",
    `base_model: ${model.baseModel}`,
    "library_name: peft",
    "tags: [lora, grpo, art-ts]",
    "---",
    "",
    `# ${model.name} (step ${step})`,
    "",
    `A LoRA adapter for \`${model.baseModel}\`, trained with reinforcement learning (GRPO) by art-ts,`,
    `project \`${model.project}\`, step ${step}.`,
    "",
    "## Use",
    "",
    "```python",
    "from peft import PeftModel",
    "from transformers import AutoModelForCausalLM",
    "",
    `base = AutoModelForCausalLM.from_pretrained(${JSON.stringify(model.baseModel)})`,
    `model = PeftModel.from_pretrained(base, "<this repository>")`,
    "```",
    "",
    "## Training",
    "",
    `- steps: ${step}`,
    `- LoRA: ${JSON.stringify(model.lora ?? { r: 8, alpha: 16, dropout: 0 })}`,
  ];
  if (last) lines.push(`- last logged reward (${last.split}, step ${last.step}): ${(last.reward as number).toFixed(4)}`);
  return `${lines.join("\n")}\n`;
}

/** What {@link pushToHub} uploaded, and where. */
export interface PushToHubResult {
  /** The repository (`user/name`). */
  repo: string;
  /** The checkpoint uploaded. */
  step: number;
  /** The commit's URL, when the Hub returned one. */
  commitUrl: string | undefined;
}

/**
 * Uploads checkpoint `step` of `model` (adapter_config.json, adapter_model.safetensors and a
 * README.md model card) to a Hub repository, creating it when it does not exist. Returns the
 * commit's URL.
 */
export async function pushToHub(model: TrainableModel, options: PushToHubOptions): Promise<PushToHubResult> {
  parseOptions("pushToHub", PushToHubOptionsSchema, options);
  const hub = await import("@huggingface/hub");
  const accessToken = options.token ?? process.env.HF_TOKEN;
  if (!accessToken) throw new ConfigurationError("pushToHub needs a token with write access: pass { token } or set HF_TOKEN");
  const step = options.step ?? (await model.getStep());
  const backend = model.backend;
  const files: Array<{ path: string; content: Blob }> = [];
  for (const name of ["adapter_config.json", "adapter_model.safetensors"]) {
    const url = `${backend.url}/v1/art/models/${encodeURIComponent(model.name)}/checkpoints/${step}/files/${name}`;
    const response = await fetch(url, { headers: { Authorization: `Bearer ${backend.token}` } }).catch((error: unknown) => {
      throw new ServerUnreachableError(`pushToHub: cannot reach the gpu-server at ${backend.url}: ${(error as Error).message}`, { cause: error });
    });
    if (!response.ok) {
      throw new ServerApiError(`pushToHub: cannot read ${name} of ${model.name}@${step} from the backend: ${await response.text().catch(() => "")}`,
        response.status, null);
    }
    files.push({ path: name, content: new Blob([await response.arrayBuffer()]) });
  }
  files.push({ path: "README.md", content: new Blob([modelCard(model, step, await model.historyRows())]) });
  try {
    await hub.createRepo({ repo: options.repo, accessToken, hubUrl: options.hubUrl, private: options.private ?? true });
  } catch (error) {
    if (!/already exists|409|conflict/i.test(String((error as Error).message))) {
      throw new HubError(`pushToHub: cannot create ${options.repo}: ${(error as Error).message}`, { cause: error });
    }
  }
  const commit = await onHub(`pushToHub: uploading to ${options.repo}`, () => hub.uploadFiles({
    repo: options.repo, accessToken, hubUrl: options.hubUrl, files,
    commitTitle: `${model.name}@${step}: LoRA adapter trained with art-ts`,
  }));
  return { repo: options.repo, step, commitUrl: commit?.commit?.url };
}

/** Options of {@link downloadFromHub}. */
export interface DownloadFromHubOptions {
  /** A branch, tag or commit (default "main"). */
  revision?: string;
  /** The cache folder (default: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`). */
  cacheDir?: string;
  /** A Hub token for private or gated repositories (default `HF_TOKEN`). */
  token?: string;
  /** Another Hub endpoint. */
  hubUrl?: string;
}

/**
 * Downloads a model repository (e.g. a base model) into the local Hugging Face cache, where a
 * server on this machine finds it by its id; returns the snapshot folder.
 */
export async function downloadFromHub(repo: string, options: DownloadFromHubOptions = {}): Promise<string> {
  parseOptions("downloadFromHub", DownloadFromHubOptionsSchema, options);
  const hub = await import("@huggingface/hub");
  const token = options.token ?? process.env.HF_TOKEN;
  return onHub(`downloadFromHub: ${repo}`, () => hub.snapshotDownload({
    repo, revision: options.revision, hubUrl: options.hubUrl, ...(options.cacheDir ? { cacheDir: options.cacheDir } : {}),
    ...(token ? { accessToken: token } : {}),
  }));
}
