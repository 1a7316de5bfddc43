"""The benchmark plugin in Python, the twin of tests/plugins/bench (Rust): `bench.checksum`
computes the FNV-1a checksum of the payload, `bench.imports` calls `lifecycle.interrupted`
as many times as the payload says."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import lifecycle, types


def fnv1a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


class HandlerPlugin(exports.HandlerPlugin):
    def init(self, config: str) -> None:
        pass

    def on_event(self, event: types.Event) -> None:
        if event.topic == "bench.checksum":
            fnv1a(event.payload.encode())
        elif event.topic == "bench.imports":
            for _ in range(int(event.payload)):
                lifecycle.interrupted()
        else:
            raise Err(types.Error_InvalidInput(f"unknown bench topic {event.topic}"))
