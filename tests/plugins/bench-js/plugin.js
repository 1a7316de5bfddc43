// The benchmark plugin in JavaScript, the twin of tests/plugins/bench (Rust):
// `bench.checksum` computes the FNV-1a checksum of the payload, `bench.imports` calls
// `lifecycle.interrupted` as many times as the payload says.

import { interrupted } from "cairn:plugin/lifecycle@0.2.0";

const encoder = new TextEncoder();

function fnv1a(bytes) {
  let value = 0xcbf29ce484222325n;
  for (const byte of bytes) {
    value = BigInt.asUintN(64, (value ^ BigInt(byte)) * 0x100000001b3n);
  }
  return value;
}

export const handlerPlugin = {
  init(_config) {},

  onEvent(event) {
    if (event.topic === "bench.checksum") {
      fnv1a(encoder.encode(event.payload));
    } else if (event.topic === "bench.imports") {
      const count = Number(event.payload);
      for (let i = 0; i < count; i++) {
        interrupted();
      }
    } else {
      throw { tag: "invalid-input", val: `unknown bench topic ${event.topic}` };
    }
  },
};
