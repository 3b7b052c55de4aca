#!/usr/bin/env node
// `npm run bench:train`: installs the benchmark extra (trl) into .venv when missing, then runs
// bench/train.py with the given flags.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { ROOT, VENV_PYTHON, venvEnv } from "./project.mjs";

const env = venvEnv();
if (spawnSync(VENV_PYTHON, ["-c", "import trl"], { env }).status !== 0) {
  console.log("[bench] installing gpu-server[bench] (trl) into .venv");
  const pip = spawnSync(VENV_PYTHON, ["-m", "pip", "install", "--retries", "1", "-e", `${path.join(ROOT, "gpu-server")}[bench]`],
    { stdio: "inherit", env });
  if (pip.status !== 0) process.exit(pip.status ?? 1);
}
const run = spawnSync(VENV_PYTHON, [path.join(ROOT, "bench", "train.py"), ...process.argv.slice(2)], { stdio: "inherit", env });
process.exit(run.status ?? 1);
