// The {{id}} plugin ({{kind}}): receives the journal events its manifest subscribes to and
// counts them in the host's kv store. Build with `npm install` once, then
// `cairn plugin build .`.

import { get, set } from "cairn:plugin/kv@0.2.0";
import { log } from "cairn:plugin/log@0.2.0";

export const handlerPlugin = {
  init(config) {
    log("info", `{{id}} started with config ${config}`);
  },

  onEvent(event) {
    const raw = get("events");
    const seen = (raw ? Number(new TextDecoder().decode(raw)) : 0) + 1;
    set("events", new TextEncoder().encode(String(seen)));
    log("info", `event #${seen}: ${event.topic} (seq ${event.seq})`);
  },
};
