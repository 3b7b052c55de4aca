// A local stand-in for the Hugging Face Hub's HTTP API (the Hub cannot be reached from here),
// speaking the endpoints @huggingface/hub uses for createRepo, uploadFiles (preupload answered with
// "regular" uploads, then the NDJSON commit), and snapshotDownload (revision info, tree, paths-info,
// resolve with byte ranges). Repositories live in memory; writes need the token.
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

interface StoredFile {
  content: Buffer;
  oid: string;
}

interface Repo {
  files: Map<string, StoredFile>;
  sha: string;
  private: boolean;
}

export interface HubStandIn {
  url: string;
  repos: Map<string, Repo>;
  requests: string[];
  close(): Promise<void>;
}

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

export async function startHubStandIn(token: string): Promise<HubStandIn> {
  const repos = new Map<string, Repo>();
  const requests: string[] = [];
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    requests.push(`${req.method} ${url.pathname}`);
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "Content-Type": "application/json", ...headers });
      res.end(JSON.stringify(body));
    };
    const authorized = req.headers.authorization === `Bearer ${token}`;
    const body = await readBody(req);
    let m: RegExpMatchArray | null;
    if (req.method === "POST" && url.pathname === "/api/repos/create") {
      if (!authorized) return send(401, { error: "Invalid credentials" });
      const spec = JSON.parse(body.toString()) as { name: string; organization?: string; private?: boolean };
      const id = spec.organization ? `${spec.organization}/${spec.name}` : spec.name;
      if (repos.has(id)) return send(409, { error: "You already created this model repo" });
      repos.set(id, { files: new Map(), sha: "0".repeat(40), private: spec.private ?? false });
      return send(200, { url: `${url.origin}/${id}`, name: id });
    }
    if ((m = url.pathname.match(/^\/api\/models\/(.+)\/preupload\/([^/]+)$/)) && req.method === "POST") {
      if (!authorized) return send(401, { error: "Invalid credentials" });
      const files = (JSON.parse(body.toString()) as { files: Array<{ path: string }> }).files;
      return send(200, { files: files.map((f) => ({ path: f.path, uploadMode: "regular", shouldIgnore: false })) });
    }
    if ((m = url.pathname.match(/^\/api\/models\/(.+)\/commit\/([^/]+)$/)) && req.method === "POST") {
      if (!authorized) return send(401, { error: "Invalid credentials" });
      const repo = repos.get(m[1]!);
      if (!repo) return send(404, { error: "Repository not found" });
      for (const line of body.toString().split("\n").filter(Boolean)) {
        const item = JSON.parse(line) as { key: string; value: { path: string; content?: string; encoding?: string } };
        if (item.key === "file") {
          const content = Buffer.from(item.value.content ?? "", "base64");
          repo.files.set(item.value.path, { content, oid: createHash("sha1").update(content).digest("hex") });
        } else if (item.key === "deletedFile") {
          repo.files.delete(item.value.path);
        }
      }
      repo.sha = createHash("sha1").update(repo.sha + body.toString()).digest("hex");
      return send(200, { commitOid: repo.sha, commitUrl: `${url.origin}/${m[1]}/commit/${repo.sha}` });
    }
    if ((m = url.pathname.match(/^\/api\/models\/(.+)\/revision\/([^/]+)$/)) && req.method === "GET") {
      const repo = repos.get(m[1]!);
      if (!repo || (repo.private && !authorized)) return send(404, { error: "Repository not found" });
      return send(200, { id: m[1], _id: m[1], sha: repo.sha, private: repo.private, siblings: [...repo.files.keys()].map((rfilename) => ({ rfilename })) });
    }
    if ((m = url.pathname.match(/^\/api\/models\/(.+)\/tree\/([^/]+)$/)) && req.method === "GET") {
      const repo = repos.get(m[1]!);
      if (!repo) return send(404, { error: "Repository not found" });
      return send(200, [...repo.files].map(([path, f]) => ({ type: "file", path, oid: f.oid, size: f.content.length })));
    }
    if ((m = url.pathname.match(/^\/api\/models\/(.+)\/paths-info\/([^/]+)$/)) && req.method === "POST") {
      const repo = repos.get(m[1]!);
      if (!repo) return send(404, { error: "Repository not found" });
      const paths = (JSON.parse(body.toString()) as { paths: string[] }).paths;
      return send(200, paths.filter((p) => repo.files.has(p)).map((path) => ({
        type: "file", path, oid: repo.files.get(path)!.oid, size: repo.files.get(path)!.content.length,
        lastCommit: { id: repo.sha, title: "commit", date: new Date().toISOString() },
      })));
    }
    if ((m = url.pathname.match(/^\/(.+?)\/(resolve|raw)\/([^/]+)\/(.+)$/)) && req.method === "GET") {
      const repo = repos.get(m[1]!);
      const file = repo?.files.get(decodeURIComponent(m[4]!));
      if (!file) return send(404, { error: "Entry not found" }, { "X-Error-Code": "EntryNotFound" });
      const range = req.headers.range?.match(/bytes=(\d+)-(\d*)/);
      if (range) {
        const start = Number(range[1]);
        const end = range[2] ? Math.min(Number(range[2]), file.content.length - 1) : file.content.length - 1;
        res.writeHead(206, { "Content-Range": `bytes ${start}-${end}/${file.content.length}`, "Content-Length": String(end - start + 1),
          "Content-Type": "application/octet-stream", ETag: `"${file.oid}"`, "X-Repo-Commit": repo!.sha });
        return res.end(file.content.subarray(start, end + 1));
      }
      res.writeHead(200, { "Content-Length": String(file.content.length), "Content-Type": "application/octet-stream", ETag: `"${file.oid}"` });
      return res.end(file.content);
    }
    send(404, { error: `stand-in: no route for ${req.method} ${url.pathname}` });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    repos,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
