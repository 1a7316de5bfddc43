"""The {{id}} memory backend. Every call answers `unavailable` until you give it a store:
Cairn uses it when cairn.yaml says `memory: {backend: {{id}}}`. Build with
`cairn plugin build .`."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types


def not_yet(call: str) -> Err:
    return Err(types.Error_Unavailable(f"{{id}} does not implement {call} yet (app.py)"))


class MemoryBackendPlugin(exports.MemoryBackendPlugin):
    def init(self, config: str) -> None:
        pass

    def store_entry(self, entry: types.NewMemory) -> str:
        raise not_yet("store-entry")

    def recall(self, query: types.RecallQuery) -> list:
        raise not_yet("recall")

    def get(self, id: str) -> types.MemoryEntry:
        raise not_yet("get")

    def list_entries(self, scope: types.MemoryScope, kinds: list, limit: int) -> list:
        raise not_yet("list-entries")

    def forget(self, id: str) -> bool:
        raise not_yet("forget")

    def count(self, scope: types.MemoryScope) -> int:
        raise not_yet("count")

    def health(self) -> str:
        raise not_yet("a store")
