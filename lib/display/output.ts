/**
 * Rich output for notebook cells, with terminal fallbacks: the display message and its handle.
 *
 * Inside the project's tslab kernel these helpers send Jupyter `display_data` messages (one
 * output carrying several MIME types, updatable in place by display id). Anywhere else (a script
 * run with tsx, a test) they print readable text to stdout.
 * @module
 */

/** The payload of a Jupyter display message: one output, several representations. */
export type MimeBundle = Record<string, unknown>;

type WriteDisplayData = (
  content: { data: MimeBundle; metadata: Record<string, unknown>; transient: { display_id?: string } },
  update: boolean,
) => void;

/** True when running inside a Jupyter kernel started by kernel/launch.cjs (or plain tslab). */
export function inNotebook(): boolean {
  return kernelWriter() !== null;
}

/** Where the kernel keeps the output writers of the cell that runs (tslab's jupyter module; kernel/server.cjs sets them). */
interface KernelOutputs {
  lastWriteDisplayData?: WriteDisplayData | null;
  lastClearOutput?: ((wait: boolean) => void) | null;
}

function kernelOutputs(): KernelOutputs | null {
  const underTslab = process.env.ART_TS_KERNEL === "1" || /tslab/.test(process.argv[1] ?? "");
  if (!underTslab) return null;
  try {
    return require("tslab/dist/jupyter") as KernelOutputs;
  } catch {
    return null;
  }
}

function kernelWriter(): WriteDisplayData | null {
  return kernelOutputs()?.lastWriteDisplayData ?? null;
}

/**
 * Clears the outputs of the cell that runs (IPython's `clear_output`). With `wait`, the outputs go
 * only when the next one arrives, so a redraw does not flicker. Returns false outside the project's kernel.
 */
export function clearOutput(options: { wait?: boolean } = {}): boolean {
  const clear = kernelOutputs()?.lastClearOutput;
  if (!clear) return false;
  clear(options.wait ?? false);
  return true;
}

/**
 * The method the project's kernel calls on a cell's last value for its rich view (Deno's Jupyter
 * convention): it returns a MIME bundle, shown as the cell's Out[n] instead of the value's text.
 */
export const JUPYTER_DISPLAY: symbol = Symbol.for("Jupyter.display");

/** Gives every instance of `type` a rich view when it is a cell's value (its Out[n] is `bundle(value)`). */
export function showsAs<T extends object>(type: { prototype: T }, bundle: (value: T) => MimeBundle): void {
  Object.defineProperty(type.prototype, JUPYTER_DISPLAY, {
    value(this: T) {
      return bundle(this);
    },
    configurable: true,
  });
}

/** Gives one object a rich view when it is a cell's value; not enumerable, so JSON and spreads leave it out. */
export function withRichView<T extends object>(value: T, bundle: (value: T) => MimeBundle): T {
  Object.defineProperty(value, JUPYTER_DISPLAY, { value: () => bundle(value), configurable: true });
  return value;
}

let displayCounter = 0;

/** A display output that can be replaced in place (Jupyter `update_display_data`). */
export class DisplayHandle {
  /** The Jupyter display id of this output. */
  readonly id: string;
  private shown = false;

  constructor(id?: string) {
    displayCounter += 1;
    this.id = id ?? `art-${process.pid}-${Date.now().toString(36)}-${displayCounter}`;
  }

  /** Shows the bundle; the first call creates the output, later calls replace it. Returns false outside a kernel. */
  show(bundle: MimeBundle): boolean {
    const write = kernelWriter();
    if (!write) return false;
    write({ data: bundle, metadata: {}, transient: { display_id: this.id } }, this.shown);
    this.shown = true;
    return true;
  }
}

/** Shows one output with the given MIME bundle; outside a kernel prints its `text/plain` part. */
export function displayBundle(bundle: MimeBundle): void {
  if (!new DisplayHandle().show(bundle)) {
    const text = bundle["text/plain"];
    if (typeof text === "string") console.log(text);
  }
}

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
