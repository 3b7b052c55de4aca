// The client as a TypeScript team meets it in its own project: `npm pack` of this repository,
// installed into a fresh project outside it from the npm registry alone (no `overrides`, no
// danfo), the server wheel installed into a fresh virtual environment, then docs/own-project.md's ES
// module script (top-level await) and a CommonJS script run against the real server, and tsc
// type-checks both against the package's declarations, with an agent on the OpenAI Agents SDK's
// default model given the user's own `openai` client (agents-default-model.mts: no cast).
//
// The fresh venv borrows the project venv's site-packages through a .pth file (torch and
// transformers are ~1 GB; the test installs only the wheel, with --no-index --no-deps, and checks
// that every requirement the wheel declares is met there and that art_server comes from the wheel).
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ROOT, run, VENV_BIN } from "../support/helpers";

const VENV_PYTHON = path.join(VENV_BIN, "python");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "art-package-"));
const project = path.join(work, "my-agent");
const venv = path.join(project, ".venv");
const rootPackage = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")) as { devDependencies: Record<string, string> };

/** PATH without this repository's .venv (whose art-server would answer for the fresh one). */
const cleanPath = (process.env.PATH ?? "").split(path.delimiter).filter((dir) => !dir.startsWith(ROOT)).join(path.delimiter);
const consumerEnv = (extra: Record<string, string> = {}) => ({ ...process.env, PATH: cleanPath, ART_SERVER_COMMAND: "", ...extra });

async function inProject(command: string, args: string[], env: Record<string, string> = {}, cwd = project) {
  const result = await run(command, args, { cwd, env: consumerEnv(env) });
  assert.equal(result.exitCode, 0, `${command} ${args.join(" ")} failed (exit ${result.exitCode}):\n${result.all}`);
  return result;
}

const npx = (bin: string) => path.join(project, "node_modules", ".bin", bin);

// The page a user follows to set up their own project (the README links to it).
const GUIDE = path.join(ROOT, "docs", "own-project.md");

/** The commands of docs/own-project.md's steps (its first bash block), without comments. */
function guideSteps(): string[] {
  const guide = fs.readFileSync(GUIDE, "utf8");
  const block = guide.slice(guide.indexOf("```bash\n") + 8, guide.indexOf("```\n", guide.indexOf("```bash\n") + 8));
  return block.split("\n").map((line) => line.replace(/\s+#.*$/, "").trim()).filter((line) => line && !line.startsWith("#"));
}

describe("art-ts installed into a project outside this repository", { timeout: 900_000 }, () => {
  let tarball = "";

  before(async () => {
    fs.mkdirSync(project);
    // npm pack runs prepack: the CommonJS build with declarations, the ES module entry, the wheel.
    const packed = await run("npm", ["pack", "--json", "--pack-destination", work], { cwd: ROOT });
    assert.equal(packed.exitCode, 0, packed.all);
    const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf("["))) as Array<{ filename: string; files: Array<{ path: string }> }>;
    tarball = path.join(work, info!.filename);
    const files = info!.files.map((f) => f.path);
    console.log(`packed ${info!.filename}: ${files.length} files`);
    for (const file of ["dist/index.mjs", "dist/index.d.mts", "dist/cjs/index.js", "dist/cjs/index.d.ts", "LICENSE", "README.md"]) {
      assert.ok(files.includes(file), `${file} is not in the tarball`);
    }
    assert.ok(files.some((f) => /^dist\/server\/art_server-.*\.whl$/.test(f)), "the server wheel is not in the tarball");
    assert.ok(!files.some((f) => f.startsWith("lib/") || f.startsWith("notebooks/") || f.startsWith("tests/")), "sources leak into the tarball");

    for (const file of ["package.json", "tsconfig.json", "train.mts"]) {
      fs.copyFileSync(path.join(ROOT, "examples", "own-project", file), path.join(project, file));
    }
    for (const file of ["consumer-check.cts", "agents-default-model.mts"]) {
      fs.copyFileSync(path.join(ROOT, "tests", "ts", "support", "fixtures", file), path.join(project, file));
    }
    const started = Date.now();
    await inProject("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball]);
    // docs/own-project.md's own line for the dev tools, as written (its TypeScript pin included).
    const devTools = guideSteps().find((line) => line.startsWith("npm install -D "))!.split(/\s+/).slice(3);
    await inProject("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", "--save-dev", ...devTools]);
    // A framework a user brings: the OpenAI Agents SDK with the `openai` major it uses (docs/frameworks.md),
    // which differs from art-ts's own (art-ts keeps its copy in its folder).
    const agentsOpenai = (JSON.parse(fs.readFileSync(path.join(ROOT, "node_modules", "@openai", "agents-openai", "package.json"), "utf8")) as
      { dependencies: Record<string, string> }).dependencies.openai;
    await inProject("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", `@openai/agents@${rootPackage.devDependencies["@openai/agents"]}`,
      `openai@${agentsOpenai}`]);
    console.log(`npm install in a fresh project: ${((Date.now() - started) / 1000).toFixed(1)} s`);

    // The wheel, from the installed package, into a fresh venv in the project.
    const wheelDir = path.join(project, "node_modules", "art-ts", "dist", "server");
    const wheel = path.join(wheelDir, fs.readdirSync(wheelDir).find((f) => f.endsWith(".whl"))!);
    await inProject(VENV_PYTHON, ["-c", "import sys, venv; venv.create(sys.argv[1], with_pip=False)", venv]);
    const purelib = async (python: string) => (await run(python, ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).stdout.trim();
    fs.writeFileSync(path.join(await purelib(path.join(venv, "bin", "python")), "borrowed-dependencies.pth"), `${await purelib(VENV_PYTHON)}\n`);
    await inProject(VENV_PYTHON, ["-m", "pip", "--python", path.join(venv, "bin", "python"), "install", "--quiet", "--no-index", "--no-deps",
      "--disable-pip-version-check", wheel]);
  });

  after(() => {
    if (!process.env.ART_KEEP_PACKAGE_TEST) fs.rmSync(work, { recursive: true, force: true });
  });

  it("the wheel's art-server runs from the fresh venv, with its own copy of art_server and every requirement met", async () => {
    const python = path.join(venv, "bin", "python");
    const check = await inProject(python, ["-c", [
      "import art_server, importlib.metadata as md, json",
      "from packaging.requirements import Requirement",
      "reqs = [Requirement(r) for r in md.requires('art-server') or []]",
      "core = [r for r in reqs if not r.marker or r.marker.evaluate({'extra': ''})]",
      "def met(r):",
      "    try: return r.specifier.contains(md.version(r.name), prereleases=True)",
      "    except md.PackageNotFoundError: return False",
      "missing = [str(r) for r in core if not met(r)]",
      "print(json.dumps({'file': art_server.__file__, 'version': md.version('art-server'), 'requirements': len(core), 'missing': missing}))",
    ].join("\n")]);
    const info = JSON.parse(check.stdout) as { file: string; version: string; requirements: number; missing: string[] };
    assert.ok(info.file.startsWith(venv), `art_server imported from ${info.file}, not from the fresh venv`);
    assert.deepEqual(info.missing, []);
    assert.ok(info.requirements >= 10);
    const help = await inProject(path.join(venv, "bin", "art-server"), ["--help"]);
    assert.match(help.stdout, /--base-model/);
  });

  it("docs/own-project.md shows the example script exactly as it is tested", () => {
    const guide = fs.readFileSync(GUIDE, "utf8");
    const script = fs.readFileSync(path.join(ROOT, "examples", "own-project", "train.mts"), "utf8");
    assert.ok(guide.includes("```ts\n" + script + "```\n"), "docs/own-project.md's script differs from examples/own-project/train.mts");
  });

  it("tsc type-checks the ES module and the CommonJS consumers against the package's declarations (the Agents SDK's default model without a cast)", async () => {
    const result = await inProject(npx("tsc"), ["-p", "tsconfig.json", "--noEmit"]);
    assert.equal(result.all, "");
    // The checker does look into the package: a wrong option is a type error there.
    fs.writeFileSync(path.join(project, "wrong.mts"), 'import { TrainableModel } from "art-ts";\n' +
      'new TrainableModel({ name: "a", project: "b" }).train([], { learning_rate: 1 });\n');
    const wrong = await run(npx("tsc"), ["-p", "tsconfig.json", "--noEmit"], { cwd: project });
    fs.rmSync(path.join(project, "wrong.mts"));
    assert.notEqual(wrong.exitCode, 0);
    assert.match(wrong.all, /'learning_rate' does not exist in type 'TrainOptions'. Did you mean to write 'learningRate'\?/);
  });

  it("docs/own-project.md's steps copy the example's tsconfig and pin the TypeScript this project tests", () => {
    const steps = guideSteps();
    assert.ok(steps.some((l) => l.startsWith("cp ") && l.includes("tsconfig.json") && l.includes("package.json")), steps.join("\n"));
    assert.ok(steps.some((l) => l.includes(".art/") && l.includes(".gitignore")), "docs/own-project.md does not say to git-ignore .art/");
    const devTools = steps.find((l) => l.startsWith("npm install -D "))!;
    assert.ok(devTools.includes(`typescript@${rootPackage.devDependencies.typescript}`), `${devTools}: not the TypeScript that is tested`);
    const installed = JSON.parse(fs.readFileSync(path.join(project, "node_modules", "typescript", "package.json"), "utf8")) as { version: string };
    assert.equal(installed.version, rootPackage.devDependencies.typescript);
  });

  it("runs docs/own-project.md's quick try and then the full run in that order: the model continues (default base model)", async () => {
    // As docs/own-project.md lists them: `STEPS=2 npx tsx train.mts`, then `npx tsx train.mts` (here STEPS=1 for time).
    const quick = guideSteps().find((l) => l.endsWith("npx tsx train.mts") && l.startsWith("STEPS="))!;
    const first = await inProject(npx("tsx"), ["train.mts"], { STEPS: quick.match(/^STEPS=(\d+)/)![1]! });
    const lines = first.stdout.trim().split("\n");
    assert.equal(lines.length, 2, first.all);
    assert.match(lines[0]!, /^step 0 -> 1: reward \d\.\d{3}, answered \d\.\d\d, groups trained \d\/4$/);
    assert.match(lines[1]!, /^step 1 -> 2: reward \d\.\d{3}, answered \d\.\d\d, groups trained \d\/4$/);
    const more = await inProject(npx("tsx"), ["train.mts"], { STEPS: "1" });
    assert.match(more.stdout.trim(), /^step 2 -> 3: reward /, more.all);
    assert.ok(fs.readdirSync(path.join(project, ".art", "logs")).some((f) => f.startsWith("server-")), "the server log is in ./.art/logs");
  });

  it("runs a CommonJS consumer with ART_SERVER_COMMAND: camelCase results, ConfigurationErrors for bad options, danfo optional", async () => {
    const result = await inProject(npx("tsx"), ["consumer-check.cts"], {
      ART_SERVER_COMMAND: path.join(venv, "bin", "art-server"), CONSUMER_DATA_DIR: path.join(work, "cjs-data"),
    });
    const out = JSON.parse(result.stdout.trim().split("\n").pop()!) as {
      registered: Record<string, unknown> & { lora: Record<string, unknown> }; step: number; fromStep: number;
      metrics: Record<string, unknown>; events: string[];
      errors: Record<string, { name: string; artError: boolean; configuration: boolean; message: string }>;
      historyWithoutDanfo: { name: string; artError: boolean; message: string };
      captured: { roles: string[]; tokens: number[] };
      mcpWithoutSdk: { name: string; message: string };
    };
    assert.deepEqual(out.captured.roles, ["user", "assistant", "user", "assistant"], "a JSON and a streamed call, captured by model.rollout");
    assert.ok(out.captured.tokens.length === 2 && out.captured.tokens.every((n) => n > 0), `token ids of both calls: ${out.captured.tokens}`);
    assert.equal(out.mcpWithoutSdk.name, "MissingDependencyError");
    assert.match(out.mcpWithoutSdk.message, /optional package @modelcontextprotocol\/sdk: `npm install @modelcontextprotocol\/sdk`/);
    assert.deepEqual(Object.keys(out.registered).sort(), ["baseModel", "inferenceName", "lora", "name", "path", "project", "reporters", "resumed", "step", "training"]);
    assert.deepEqual(out.registered.lora, { r: 4, alpha: 16, dropout: 0, targetModules: ["q_proj", "v_proj"] });
    assert.deepEqual([out.fromStep, out.step], [0, 1]);
    assert.equal(out.metrics.step, undefined, "metrics carry no step of their own (fromStep and step say it)");
    for (const key of ["reward", "rewardStd", "groupsTrained", "gradNorm", "tokensTrained", "forwardBackwardSeconds", "groupsSkippedByReason"]) {
      assert.ok(key in out.metrics, `${key} missing from ${Object.keys(out.metrics).join(", ")}`);
    }
    assert.ok(!Object.keys(out.metrics).some((k) => k.includes("_")), `snake_case in ${Object.keys(out.metrics).join(", ")}`);
    assert.deepEqual([out.events[0], out.events[out.events.length - 1]], ["start", "result"]);
    const expected: Record<string, RegExp> = {
      trainSnakeCase: /^model\.train: unknown option `learning_rate`; did you mean `learningRate`\?/,
      startSnakeCase: /^LocalBackend\.start: unknown option `base_model`; did you mean `baseModel`\?/,
      concurrencyZero: /^gatherTrajectories: option `concurrency` must be >= 1 \(got 0\)$/,
      maxExceptionsNegative: /^gatherTrajectories: option `maxExceptions` must be >= 0 \(got -1\)$/,
      badServerCommand: /^LocalBackend\.start: the server command "\/nonexistent\/art-server" \(the serverCommand option\) is not an executable file\. Install the server/,
    };
    assert.deepEqual([out.historyWithoutDanfo.name, out.historyWithoutDanfo.artError], ["MissingDependencyError", true]);
    assert.match(out.historyWithoutDanfo.message, /optional package danfojs-node: `npm install danfojs-node`/);
    for (const [name, pattern] of Object.entries(expected)) {
      const error = out.errors[name]!;
      assert.deepEqual([error.name, error.artError, error.configuration], ["ConfigurationError", true, true], `${name}: ${JSON.stringify(error)}`);
      assert.match(error.message, pattern, name);
    }
  });

  it("import and require share one copy of each class; without a server the error says how to install one", async () => {
    const empty = fs.mkdtempSync(path.join(work, "no-server-"));
    const script = [
      `const esm = await import(${JSON.stringify(path.join(project, "node_modules", "art-ts", "dist", "index.mjs"))});`,
      `const { createRequire } = await import("node:module");`,
      `const cjs = createRequire(${JSON.stringify(path.join(project, "package.json"))})("art-ts");`,
      "let message = 'no error';",
      "try { await esm.LocalBackend.start(); } catch (e) { message = `${e.name}|${e instanceof cjs.ConfigurationError}|${e.message}`; }",
      "console.log(JSON.stringify({ same: esm.ArtError === cjs.ArtError && esm.TrainableModel === cjs.TrainableModel, message }));",
    ].join("\n");
    const result = await inProject(process.execPath, ["--input-type=module", "-e", script], {}, empty);
    const out = JSON.parse(result.stdout) as { same: boolean; message: string };
    assert.equal(out.same, true);
    const [name, crossInstance, message] = out.message.split("|");
    assert.deepEqual([name, crossInstance], ["ConfigurationError", "true"]);
    assert.match(message!, /no gpu-server command found/);
    assert.match(message!, /pip install ".*node_modules\/art-ts\/dist\/server\/art_server-[^"]+\.whl"/, "names the wheel shipped in the package");
    assert.match(message!, /ART_SERVER_COMMAND/);
  });
});
