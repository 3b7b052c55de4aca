// Jupyter's wire protocol (messaging spec 5.3): a message's frames, its HMAC signature, and the
// header of a reply. https://jupyter-client.readthedocs.io/en/latest/messaging.html#the-wire-protocol
"use strict";
const crypto = require("node:crypto");

const DELIMITER = Buffer.from("<IDS|MSG>");
const PROTOCOL_VERSION = "5.3";

/** Signs and reads messages with the connection file's key (an empty key: unsigned, as the spec allows). */
class Session {
  constructor(key, scheme = "hmac-sha256") {
    this.key = key ?? "";
    this.algorithm = scheme.replace(/^hmac-/, "");
    this.id = crypto.randomUUID();
  }

  sign(parts) {
    if (!this.key) return "";
    const hmac = crypto.createHmac(this.algorithm, this.key);
    for (const part of parts) hmac.update(part);
    return hmac.digest("hex");
  }

  /** Frames as a router socket hands them over -> { identities, header, parent, metadata, content, buffers }. */
  parse(frames) {
    const at = frames.findIndex((f) => Buffer.from(f).equals(DELIMITER));
    if (at < 0) throw new Error("a message without the <IDS|MSG> delimiter");
    const [signature, ...parts] = frames.slice(at + 1);
    const body = parts.slice(0, 4);
    const expected = this.sign(body);
    const given = Buffer.from(signature).toString();
    if (expected && (given.length !== expected.length || !crypto.timingSafeEqual(Buffer.from(given), Buffer.from(expected)))) {
      throw new Error("a message with a wrong signature");
    }
    const [header, parent, metadata, content] = body.map((b) => JSON.parse(Buffer.from(b).toString() || "{}"));
    return { identities: frames.slice(0, at), header, parent, metadata, content, buffers: parts.slice(4) };
  }

  /** The frames of a message of `msgType` answering (or caused by) `parent`. */
  frames(msgType, content, parent, { identities = [], metadata = {} } = {}) {
    const header = {
      msg_id: crypto.randomUUID(), msg_type: msgType, session: this.id, username: parent?.header?.username ?? "kernel",
      date: new Date().toISOString(), version: PROTOCOL_VERSION,
    };
    const body = [header, parent?.header ?? {}, metadata, content].map((part) => JSON.stringify(part));
    return [...identities, DELIMITER, this.sign(body), ...body];
  }
}

module.exports = { Session, PROTOCOL_VERSION };
