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

function kernelWriter(): WriteDisplayData | null {
  const underTslab = process.env.ART_TS_KERNEL === "1" || /tslab/.test(process.argv[1] ?? "");
  if (!underTslab) return null;
  try {
    // tslab keeps the writer of the executing cell on this module; it is null between cells.
    const jupyter = require("tslab/dist/jupyter") as { lastWriteDisplayData?: WriteDisplayData | null };
    return jupyter.lastWriteDisplayData ?? null;
  } catch {
    return null;
  }
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
