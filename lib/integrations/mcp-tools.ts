/**
 * MCP tools for rollouts: an MCP server's tools as OpenAI tool definitions (for the request and the
 * trajectory), and the model's tool calls executed on the server as `tool` messages. Works over any
 * connected MCP client (`McpTools.fromClient`) or starts a stdio server itself (`McpTools.stdio`,
 * with the optional package `@modelcontextprotocol/sdk`).
 * @module
 */
import type OpenAI from "openai";
import { z } from "zod";
import { ArtError, MissingDependencyError } from "../core/errors";
import { parseOptions } from "../core/options";
import type { ToolParam } from "../core/trajectory";

type ToolCall = OpenAI.Chat.Completions.ChatCompletionMessageToolCall;
type ToolMessage = OpenAI.Chat.Completions.ChatCompletionToolMessageParam;

/** An MCP server's tool, as `tools/list` describes it. */
export interface McpToolInfo {
  /** The tool's name, as the model calls it. */
  name: string;
  /** What it does, for the model. */
  description?: string;
  /** Its arguments as a JSON schema. */
  inputSchema: Record<string, unknown>;
}

/** What this helper needs of an MCP client (the SDK's `Client` has it). */
export interface McpClientLike {
  /** One page of `tools/list`. */
  listTools(params?: { cursor?: string }): Promise<{
    /** The tools on this page. */
    tools: McpToolInfo[];
    /** Where the next page starts, when there is one. */
    nextCursor?: string;
  }>;
  /** `tools/call`. */
  callTool(params: { name: string; arguments?: Record<string, unknown> }): Promise<unknown>;
  /** Closes the connection. */
  close?(): Promise<void>;
}

/** What a tool call gave back, as text for the model. */
export interface McpToolResult {
  /** The result's text content, joined. */
  text: string;
  /** The server reported an error (or the call could not be made: unknown tool, arguments not a JSON object). */
  isError: boolean;
}

/** Options of {@link McpTools.stdio}. */
export interface McpStdioOptions {
  /** The server's command, e.g. `node`. */
  command: string;
  /** Its arguments. */
  args?: string[];
  /** Its environment (the SDK's default keeps only a few safe variables). */
  env?: Record<string, string>;
  /** Its working folder. */
  cwd?: string;
}

const McpStdioOptionsSchema = z.object({
  command: z.string().min(1),
  args: z.array(z.string()).optional(),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().min(1).optional(),
}).strict();

/** An MCP server's tools, ready for chat completions. */
export class McpTools {
  /** The tools as OpenAI tool definitions: pass them as `tools` (and to a trajectory). */
  readonly definitions: ToolParam[];

  private constructor(
    private readonly client: McpClientLike,
    /** The server's tools as it listed them. */
    readonly tools: McpToolInfo[],
  ) {
    this.definitions = tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, ...(tool.description ? { description: tool.description } : {}), parameters: tool.inputSchema },
    }));
  }

  /** The tools of a connected MCP client (every page of `tools/list`). */
  static async fromClient(client: McpClientLike): Promise<McpTools> {
    const tools: McpToolInfo[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : undefined);
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    return new McpTools(client, tools);
  }

  /** Starts a stdio MCP server (`command args...`) and lists its tools; `close()` stops it. */
  static async stdio(options: McpStdioOptions): Promise<McpTools> {
    const { command, args, env, cwd } = parseOptions("McpTools.stdio", McpStdioOptionsSchema, options);
    // Module names in variables: the SDK is an optional package, resolved only when used.
    const clientModule = "@modelcontextprotocol/sdk/client/index.js";
    const stdioModule = "@modelcontextprotocol/sdk/client/stdio.js";
    let sdk: { Client: new (info: { name: string; version: string }) => McpClientLike & { connect(transport: unknown): Promise<void> } };
    let stdio: { StdioClientTransport: new (params: McpStdioOptions & { stderr?: string }) => unknown };
    try {
      sdk = await import(clientModule);
      stdio = await import(stdioModule);
    } catch (error) {
      throw new MissingDependencyError("MCP servers need the optional package @modelcontextprotocol/sdk: `npm install @modelcontextprotocol/sdk`", { cause: error });
    }
    const client = new sdk.Client({ name: "art-ts", version: "1" });
    try {
      await client.connect(new stdio.StdioClientTransport({ command, ...(args ? { args } : {}), ...(env ? { env } : {}), ...(cwd ? { cwd } : {}), stderr: "inherit" }));
    } catch (error) {
      throw new ArtError(`McpTools.stdio: could not start or reach \`${[command, ...(args ?? [])].join(" ")}\`: ${(error as Error).message}`, { cause: error });
    }
    return McpTools.fromClient(client);
  }

  /** The tool names. */
  names(): string[] {
    return this.tools.map((tool) => tool.name);
  }

  /** Calls one tool; an unknown tool or a server-side error comes back as an error result, not a throw. */
  async call(name: string, args: Record<string, unknown> = {}): Promise<McpToolResult> {
    if (!this.tools.some((tool) => tool.name === name)) {
      return { text: `Error: there is no tool named ${JSON.stringify(name)}; the tools are ${this.names().join(", ")}`, isError: true };
    }
    let result: { content?: { type: string; text?: string }[]; structuredContent?: unknown; isError?: boolean };
    try {
      result = (await this.client.callTool({ name, arguments: args })) as typeof result;
    } catch (error) {
      return { text: `Error: ${(error as Error).message}`, isError: true };
    }
    const text = (result.content ?? []).map((part) => (part.type === "text" ? part.text ?? "" : JSON.stringify(part))).join("\n");
    return { text: text || (result.structuredContent !== undefined ? JSON.stringify(result.structuredContent) : ""), isError: result.isError === true };
  }

  /**
   * Runs the model's tool calls (from `completion.choices[0].message.tool_calls`), in order, and
   * returns one `tool` message per call to append to the conversation. Arguments that are not a
   * JSON object become an error message the model can read, as the frameworks do.
   */
  async run(toolCalls: readonly ToolCall[] | undefined): Promise<ToolMessage[]> {
    const messages: ToolMessage[] = [];
    for (const call of toolCalls ?? []) {
      if (call.type !== "function") continue;
      let args: unknown;
      try {
        args = call.function.arguments ? JSON.parse(call.function.arguments) : {};
      } catch {
        args = undefined;
      }
      const result = args && typeof args === "object" && !Array.isArray(args)
        ? await this.call(call.function.name, args as Record<string, unknown>)
        : { text: `Error: the arguments of ${call.function.name} are not a JSON object: ${call.function.arguments.slice(0, 200)}`, isError: true };
      messages.push({ role: "tool", tool_call_id: call.id, content: result.text });
    }
    return messages;
  }

  /** Disconnects (and stops a server started by {@link McpTools.stdio}). */
  async close(): Promise<void> {
    await this.client.close?.();
  }
}
