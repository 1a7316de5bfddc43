// The {{id}} memory backend. Every call answers `unavailable` until you give it a store:
// Cairn uses it when cairn.yaml says `memory: {backend: {{id}}}`. Build with
// `npm install` once, then `cairn plugin build .`.

function notYet(call) {
  return { tag: "unavailable", val: `{{id}} does not implement ${call} yet (plugin.js)` };
}

export const memoryBackendPlugin = {
  init(_config) {},
  storeEntry(_entry) {
    throw notYet("store-entry");
  },
  recall(_query) {
    throw notYet("recall");
  },
  get(_id) {
    throw notYet("get");
  },
  listEntries(_scope, _kinds, _limit) {
    throw notYet("list-entries");
  },
  forget(_id) {
    throw notYet("forget");
  },
  count(_scope) {
    throw notYet("count");
  },
  health() {
    throw notYet("a store");
  },
};
