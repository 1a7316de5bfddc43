// HTTP inbox channel: an inbox and an outbox over plain HTTP, for a web page, a phone
// shortcut or a shell script that cannot keep a connection open.
//
//   POST   /channels/http-inbox/<conversation>              send a message (text body, or
//          JSON {"text", "sender", "said_at"}); header x-sender names the sender,
//          idempotency-key makes a retried POST the same message, x-said-at (RFC 3339)
//          dates a message written earlier. Answers 202 {"id": <buffer id>}.
//   GET    /channels/http-inbox/<conversation>              the replies not yet acknowledged:
//          200 {"replies": [{"id", "text", "recipient", "in_reply_to"}]}, oldest first.
//   DELETE /channels/http-inbox/<conversation>?through=<id> acknowledge the replies up to
//          and including <id>: 200 {"removed": n}.
//
// Replies wait in the host's kv store (durable across restarts) until acknowledged. With
// `forward_to` set, each reply is first POSTed there as JSON with `fetch` (the URL's host must
// be granted in capabilities.http); a failed forward fails the delivery, which the host
// retries, so a reply is kept only once it has been forwarded.

import { push } from "cairn:plugin/buffer@0.2.0";
import { log } from "cairn:plugin/log@0.2.0";
import { get, set, delete as remove, listKeys } from "cairn:plugin/kv@0.2.0";

const settings = { max_pending: 1000, forward_to: "" };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const channelPlugin = {
  init(config) {
    Object.assign(settings, JSON.parse(config || "{}"));
    if (!Number.isInteger(settings.max_pending) || settings.max_pending < 1) {
      throw { tag: "invalid-input", val: "config.max_pending: expected a positive integer" };
    }
    const forward = settings.forward_to ? `, forwarded to ${settings.forward_to}` : "";
    log("info", `http-inbox keeps up to ${settings.max_pending} replies per conversation${forward}`);
  },

  poll() {},

  async deliver(message) {
    const conversation = message.conversation;
    const payload = JSON.parse(message.payload);
    const reply = {
      text: payload.text ?? message.payload,
      recipient: message.recipient ?? null,
      // list<u64> arrives as a BigUint64Array: JSON needs plain numbers.
      in_reply_to: Array.from(message.inReplyTo, Number),
    };
    if (settings.forward_to) {
      await forward({ conversation, ...reply });
    }
    const id = nextId(conversation);
    set(replyKey(conversation, id), encoder.encode(JSON.stringify({ id, ...reply })));
    const pending = listKeys(outboxPrefix(conversation));
    for (const key of pending.slice(0, Math.max(0, pending.length - settings.max_pending))) {
      remove(key);
      log("warn", `${conversation}: dropped unacknowledged reply ${key} (max_pending)`);
    }
    log("info", `reply ${id} to ${conversation} waits in the outbox`);
  },

  handleWebhook(request) {
    const conversation = request.path.replace(/^\/+|\/+$/g, "");
    if (!/^[A-Za-z0-9._~-]+$/.test(conversation)) {
      return respond(404, { error: "use /channels/http-inbox/<conversation> (letters, digits, . _ ~ -)" });
    }
    try {
      switch (request.method) {
        case "POST":
          return receive(conversation, request);
        case "GET":
          return respond(200, { replies: pendingReplies(conversation) });
        case "DELETE":
          return acknowledge(conversation, request.query);
        default:
          return respond(405, { error: `${request.method} is not POST, GET or DELETE` });
      }
    } catch (error) {
      // Host errors arrive as {tag, val}: bad input is the caller's, the rest is ours.
      const status = error?.payload?.tag === "invalid-input" ? 400 : 503;
      return respond(status, { error: JSON.stringify(error?.payload ?? String(error)) });
    }
  },
};

async function forward(reply) {
  let response;
  try {
    response = await fetch(settings.forward_to, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(reply),
    });
  } catch (e) {
    // Unreachable, or not granted: an error the host retries, not a trap that restarts us.
    throw { tag: "unavailable", val: `cannot reach forward_to: ${e}` };
  }
  if (!response.ok) {
    throw { tag: "unavailable", val: `forward_to answered ${response.status}` };
  }
}

function receive(conversation, request) {
  const header = (name) => request.headers.find(([key]) => key === name)?.[1];
  const body = decoder.decode(request.body);
  let text = body;
  let sender = header("x-sender");
  let saidAt = header("x-said-at");
  if ((header("content-type") ?? "").startsWith("application/json")) {
    let parsed;
    try {
      parsed = JSON.parse(body);
    } catch {
      return respond(400, { error: "the body is not JSON" });
    }
    if (typeof parsed.text !== "string") {
      return respond(400, { error: "JSON body: expected a string field `text`" });
    }
    text = parsed.text;
    sender = sender ?? parsed.sender;
    saidAt = saidAt ?? parsed.said_at;
  }
  const saidAtMs = saidAt === undefined ? undefined : Date.parse(saidAt);
  if (Number.isNaN(saidAtMs)) {
    return respond(400, { error: `said-at: expected an RFC 3339 time, got ${saidAt}` });
  }
  if (!text.trim()) {
    return respond(400, { error: "empty message" });
  }
  const id = push({
    sender: sender || "anonymous",
    conversation,
    payload: JSON.stringify({ text }),
    priority: undefined,
    dedupKey: header("idempotency-key"),
    // s64 crosses as a BigInt; the host refuses a time still to come.
    saidAt: saidAtMs === undefined ? undefined : BigInt(saidAtMs),
  });
  return respond(202, { id: Number(id) });
}

function pendingReplies(conversation) {
  return listKeys(outboxPrefix(conversation)).map((key) => JSON.parse(decoder.decode(get(key))));
}

function acknowledge(conversation, query) {
  const field = query.split("&").find((pair) => pair.startsWith("through="));
  const through = Number(field?.slice("through=".length));
  if (!Number.isInteger(through) || through < 1) {
    return respond(400, { error: "expected ?through=<reply id>" });
  }
  let removed = 0;
  for (const key of listKeys(outboxPrefix(conversation))) {
    if (Number(key.slice(-12)) <= through && remove(key)) {
      removed += 1;
    }
  }
  return respond(200, { removed });
}

// Reply ids count up per conversation; keys are zero-padded so kv's sorted listing is
// oldest first.
function nextId(conversation) {
  const key = `next/${conversation}`;
  const stored = get(key);
  const id = stored === undefined ? 1 : Number(decoder.decode(stored));
  set(key, encoder.encode(String(id + 1)));
  return id;
}

function outboxPrefix(conversation) {
  return `outbox/${conversation}/`;
}

function replyKey(conversation, id) {
  return outboxPrefix(conversation) + String(id).padStart(12, "0");
}

function respond(status, body) {
  return {
    status,
    headers: [["content-type", "application/json"]],
    body: encoder.encode(JSON.stringify(body)),
  };
}
