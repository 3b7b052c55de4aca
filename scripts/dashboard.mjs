// `npm run dashboard`: Trackio's dashboard of the runs that models registered with
// `report: ["trackio"]` sent (the store in TRACKIO_DIR, default ~/.cache/huggingface/trackio, where
// the server that trained them runs). Extra arguments go to `trackio show` (e.g. --project tictactoe).
import { spawnSync } from "node:child_process";
import path from "node:path";
import { VENV_BIN, venvEnv } from "./project.mjs";

const trackio = path.join(VENV_BIN, process.platform === "win32" ? "trackio.exe" : "trackio");
const result = spawnSync(trackio, ["show", ...process.argv.slice(2)], { stdio: "inherit", env: venvEnv() });
if (result.error) {
  console.error(`[dashboard] could not start ${trackio}: ${result.error.message}; run \`npm run setup\` first`);
  process.exit(1);
}
process.exit(result.status ?? 1);
