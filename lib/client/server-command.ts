/**
 * Where `LocalBackend` finds the gpu-server to start: the command you name, the one in this
 * repository's `.venv` when the library runs from a clone, or an `art-server` installed from the
 * wheel (in your project's `.venv` or on PATH). And the folder a project keeps its data in.
 * @module
 */
import fs from "node:fs";
import path from "node:path";
import { ConfigurationError } from "../core/errors";

/** A command that starts the server: an executable and the arguments before the server's flags. */
export interface ServerCommand {
  /** The executable. */
  command: string;
  /** Arguments before the server's own flags (e.g. `["-m", "art_server"]`). */
  args: string[];
  /** Where it came from, for messages. */
  source: string;
}

const windows = process.platform === "win32";
const venvBin = (root: string, name: string) => path.join(root, ".venv", windows ? "Scripts" : "bin", windows ? `${name}.exe` : name);

/** The art-ts repository this library runs from (a clone, with gpu-server/), or undefined when installed as a package. */
export function repositoryRoot(): string | undefined {
  for (let dir = __dirname, i = 0; i < 3; i++, dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, "gpu-server", "pyproject.toml"))) return dir;
  }
  return undefined;
}

/**
 * The folder holding `.art` (data, logs, converted models) and, in a clone, `.venv`: the
 * repository when the library runs from one, else the current directory (your project).
 */
export function workspaceRoot(): string {
  return repositoryRoot() ?? process.cwd();
}

/** The server wheel shipped inside the npm package (`dist/server/`), when there is one. */
export function bundledWheel(): string | undefined {
  const dir = path.join(__dirname, "..", "..", "server"); // this file compiles to dist/cjs/client/
  const wheel = fs.existsSync(dir) ? fs.readdirSync(dir).find((f) => /^art_server-.*\.whl$/.test(f)) : undefined;
  return wheel ? path.join(dir, wheel) : undefined;
}

function executable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/** `name` on PATH, as a full path. */
export function onPath(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const names = windows ? [`${name}.exe`, `${name}.cmd`, name] : [name];
  for (const dir of (env.PATH ?? "").split(path.delimiter).filter(Boolean)) {
    for (const candidate of names) if (executable(path.join(dir, candidate))) return path.join(dir, candidate);
  }
  return undefined;
}

/** How to get a server command, for the error that says none was found. */
export function installHint(): string {
  const wheel = bundledWheel();
  const source = wheel ?? "art-ts/gpu-server (a folder of a clone; `npm run build` there also makes the wheel, in dist/server)";
  return "Install the server into a Python >= 3.10 virtual environment: `python3 -m venv .venv && " +
    `.venv/bin/pip install ${JSON.stringify(source)}` + "` (without an NVIDIA GPU, first `.venv/bin/pip install torch " +
    "--index-url https://download.pytorch.org/whl/cpu`). LocalBackend then finds .venv/bin/art-server; elsewhere, pass " +
    "{ serverCommand: \"/path/to/art-server\" } or set ART_SERVER_COMMAND.";
}

/** Checks that a named command exists, resolving a bare name on PATH. */
function existing(command: string, source: string, env: NodeJS.ProcessEnv): string {
  const found = command.includes("/") || command.includes(path.sep) ? (executable(command) ? command : undefined) : onPath(command, env);
  if (!found) throw new ConfigurationError(`LocalBackend.start: the server command ${JSON.stringify(command)} (${source}) is not an executable file. ${installHint()}`);
  return found;
}

/**
 * The command that starts the server, in this order: `serverCommand`; `ART_SERVER_COMMAND`
 * (split on spaces); this repository's `.venv` (`python -m art_server`) when the library runs from
 * a clone; `.venv/bin/art-server` under `root`; `art-server` on PATH. Throws a
 * {@link ConfigurationError} saying how to install one when none is found.
 */
export function findServerCommand(options: { serverCommand?: string | string[]; root?: string; env?: NodeJS.ProcessEnv } = {}): ServerCommand {
  const env = options.env ?? process.env;
  if (options.serverCommand !== undefined) {
    const [command, ...args] = typeof options.serverCommand === "string" ? [options.serverCommand] : options.serverCommand;
    return { command: existing(command!, "the serverCommand option", env), args, source: "the serverCommand option" };
  }
  const fromEnv = env.ART_SERVER_COMMAND?.trim();
  if (fromEnv) {
    const [command, ...args] = fromEnv.split(/\s+/);
    return { command: existing(command!, "ART_SERVER_COMMAND", env), args, source: "ART_SERVER_COMMAND" };
  }
  const repository = options.root ?? repositoryRoot();
  const python = repository && venvBin(repository, "python");
  if (python && executable(python) && fs.existsSync(path.join(repository, "gpu-server"))) {
    return { command: python, args: ["-m", "art_server"], source: `the repository's .venv (${repository})` };
  }
  const root = options.root ?? process.cwd();
  const local = venvBin(root, "art-server");
  if (executable(local)) return { command: local, args: [], source: `${path.relative(process.cwd(), local) || local}` };
  const global = onPath("art-server", env);
  if (global) return { command: global, args: [], source: "art-server on PATH" };
  if (repository && !python) {
    throw new ConfigurationError(`LocalBackend.start: no Python environment at ${path.join(repository, ".venv")}: run \`npm run setup\` in ${repository}`);
  }
  throw new ConfigurationError(`LocalBackend.start: no gpu-server command found (looked for ART_SERVER_COMMAND, ${local} and art-server on PATH). ${installHint()}`);
}
