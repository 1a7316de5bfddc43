"""The {{id}} channel: POST /channels/{{id}}/<conversation> with a text body (header
x-sender names who sent it) puts a message into Cairn's buffer; replies are logged.
Build with `cairn plugin build .`."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import buffer, log, types


class ChannelPlugin(exports.ChannelPlugin):
    def init(self, config: str) -> None:
        log.log(types.LogLevel.INFO, f"{{id}} started with config {config}")

    def poll(self) -> None:
        pass

    def deliver(self, message: types.OutboundMessage) -> None:
        log.log(types.LogLevel.INFO, f"reply to {message.conversation}: {message.payload}")

    def handle_webhook(self, request: types.HttpRequest) -> types.HttpResponse:
        headers = dict(request.headers)
        message = types.InboundMessage(
            sender=headers.get("x-sender", "anonymous"),
            conversation=request.path.strip("/") or "default",
            payload=json.dumps({"text": request.body.decode("utf-8", "replace")}),
            priority=None,
            dedup_key=None,
            said_at=None,
        )
        try:
            return respond(202, {"id": buffer.push(message)})
        except Err as error:
            return respond(400, {"error": repr(error.value)})


def respond(status: int, body: dict) -> types.HttpResponse:
    return types.HttpResponse(
        status=status,
        headers=[("content-type", "application/json")],
        body=json.dumps(body).encode(),
    )
