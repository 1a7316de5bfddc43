// The {{id}} channel: POST /channels/{{id}}/<conversation> with a text body (header
// x-sender names who sent it) puts a message into Cairn's buffer; replies are logged.
// Build with `npm install` once, then `cairn plugin build .`.

import { push } from "cairn:plugin/buffer@0.2.0";
import { log } from "cairn:plugin/log@0.2.0";

export const channelPlugin = {
  init(config) {
    log("info", `{{id}} started with config ${config}`);
  },

  poll() {},

  deliver(message) {
    log("info", `reply to ${message.conversation}: ${message.payload}`);
  },

  handleWebhook(request) {
    const sender = request.headers.find(([name]) => name === "x-sender")?.[1] ?? "anonymous";
    const conversation = request.path.replace(/^\/+|\/+$/g, "") || "default";
    const text = new TextDecoder().decode(request.body);
    try {
      const id = push({
        sender,
        conversation,
        payload: JSON.stringify({ text }),
        priority: undefined,
        dedupKey: undefined,
        saidAt: undefined,
      });
      return respond(202, { id: Number(id) });
    } catch (error) {
      return respond(400, { error: JSON.stringify(error.payload ?? String(error)) });
    }
  },
};

function respond(status, body) {
  return {
    status,
    headers: [["content-type", "application/json"]],
    body: new TextEncoder().encode(JSON.stringify(body)),
  };
}
