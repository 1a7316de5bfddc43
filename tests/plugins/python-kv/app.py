"""A handler plugin written in Python (componentize-py) against cairn:plugin@0.1.0.

At init it counts its starts in the host's kv store and logs them; each event is logged.
It proves the plugin contract works beyond Rust.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import kv, log, types


class HandlerPlugin(exports.HandlerPlugin):
    def init(self, config: str) -> None:
        try:
            settings = json.loads(config)
        except ValueError as error:
            raise Err(types.Error_InvalidInput(f"config: {error}"))
        greeting = settings.get("greeting", "hello")
        raw = kv.get("starts")
        starts = int(raw.decode()) + 1 if raw is not None else 1
        kv.set("starts", str(starts).encode())
        log.log(types.LogLevel.INFO, f"{greeting} from python: started {starts} time(s)")

    def on_event(self, event: types.Event) -> None:
        log.log(types.LogLevel.INFO, f"python: event {event.seq} {event.topic}")
