"""The {{id}} plugin ({{kind}}): receives the journal events its manifest subscribes to
and counts them in the host's kv store. Build with `cairn plugin build .`."""

from wit_world import exports
from wit_world.imports import kv, log, types


class HandlerPlugin(exports.HandlerPlugin):
    def init(self, config: str) -> None:
        log.log(types.LogLevel.INFO, f"{{id}} started with config {config}")

    def on_event(self, event: types.Event) -> None:
        raw = kv.get("events")
        seen = int(raw.decode()) + 1 if raw is not None else 1
        kv.set("events", str(seen).encode())
        log.log(types.LogLevel.INFO, f"event #{seen}: {event.topic} (seq {event.seq})")
