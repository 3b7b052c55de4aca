// Answers Jupyter's `history_request`, which tslab does not know: JupyterLab asks for it when a
// notebook's kernel starts, and tslab printed "unknown msg_type: history_request" in the terminal
// of `npm start` and sent no reply. tslab keeps no input history, so the reply is an empty one.
"use strict";

/**
 * Wraps tslab's ZmqServer so a history request gets `history_reply` with an empty history. tslab
 * does not export its message class: it is taken from the first message handled
 * (`kernel_info_request`, which every client sends first). Returns false when tslab's internals no
 * longer look as expected (then nothing is changed).
 */
function installHistoryReply(ZmqServer) {
  const proto = ZmqServer && ZmqServer.prototype;
  if (!proto || typeof proto.handleShellMessage !== "function" || typeof proto.handleKernelInfo !== "function") return false;
  const handleKernelInfo = proto.handleKernelInfo;
  const handleShellMessage = proto.handleShellMessage;
  let Message = null;

  proto.handleKernelInfo = function (sock, msg) {
    Message = Message ?? msg.constructor;
    return handleKernelInfo.call(this, sock, msg);
  };
  proto.handleShellMessage = async function (sock, ...frames) {
    if (Message && typeof Message.fromRaw === "function") {
      let msg = null;
      try {
        msg = Message.fromRaw(this.connInfo.key, frames);
      } catch {
        // not ours to judge: tslab parses it again and reports what is wrong
      }
      if (msg && msg.header.msg_type === "history_request") {
        this.publishStatus("busy", msg);
        try {
          const reply = msg.createReply();
          reply.header.msg_type = "history_reply";
          reply.content = { status: "ok", history: [] };
          reply.signAndSend(this.connInfo.key, sock);
        } finally {
          this.publishStatus("idle", msg);
        }
        return;
      }
    }
    return handleShellMessage.call(this, sock, ...frames);
  };
  return true;
}

module.exports = { installHistoryReply };
