"""File-drop channel: every text file dropped into the inbox folder becomes a message for
the agent, and every reply is appended to a text file in the outbox folder.

    <data>/plugins/file-drop/inbox/groceries.txt       from `sender` (config), conversation "groceries"
    <data>/plugins/file-drop/inbox/ann/groceries.txt   from "ann", conversation "groceries"
    <data>/plugins/file-drop/outbox/groceries.txt      the replies, appended in order

Write a file elsewhere and move it in (or name it `.something` / `*.part` until it is
complete): a file is read as soon as a poll sees it. Once the buffer holds the message the
file moves to inbox/.processed/<sender>/; a file the buffer refuses (too large, not text)
moves to inbox/.rejected/ with a warning. A message is dated by its file's modification
time, so a note written last week is remembered as said last week. A crash between the two steps loses nothing and
duplicates nothing: the next poll pushes the file again under the same dedup key, and the
buffer answers with the first message's id.
"""

import json
import os
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import buffer, log, types

INBOX = "/inbox"
problems = {}  # what went wrong last, so a lasting problem is logged once
OUTBOX = "/outbox"
PROCESSED = os.path.join(INBOX, ".processed")
REJECTED = os.path.join(INBOX, ".rejected")

settings = {"sender": "user", "extensions": [".txt", ".md"], "max_bytes": 65536}


def info(text: str) -> None:
    log.log(types.LogLevel.INFO, text)


def warn(text: str) -> None:
    log.log(types.LogLevel.WARN, text)


class ChannelPlugin(exports.ChannelPlugin):
    def init(self, config: str) -> None:
        given = json.loads(config or "{}")
        unknown = set(given) - set(settings)
        if unknown:
            raise Err(types.Error_InvalidInput(f"config: unknown field(s) {sorted(unknown)}"))
        settings.update(given)
        for folder in (PROCESSED, REJECTED):
            ensure_dir(folder)
        info(f"watching {INBOX} for {', '.join(settings['extensions'])} files")

    def poll(self) -> None:
        try:
            waiting = waiting_files()
        except OSError as e:
            # A name the sandbox cannot read (not UTF-8, say) fails the whole listing: say so
            # once, and keep polling until someone renames it.
            if str(e) != problems.get("listing"):
                warn(f"cannot list the inbox ({e}): rename or remove the file it names")
                problems["listing"] = str(e)
            return
        problems.pop("listing", None)
        for sender, path in waiting:
            take_in(sender, path)

    def deliver(self, message: types.OutboundMessage) -> None:
        text = json.loads(message.payload).get("text", message.payload)
        name = safe_name(message.conversation) + ".txt"
        to = f" to {message.recipient}" if message.recipient else ""
        with open(os.path.join(OUTBOX, name), "a", encoding="utf-8") as out:
            out.write(f"--- reply{to} ---\n{text}\n\n")
        info(f"reply to {message.conversation} written to outbox/{name}")

    def handle_webhook(self, request: types.HttpRequest) -> types.HttpResponse:
        return types.HttpResponse(status=404, headers=[], body=b"file-drop has no webhook")


def waiting_files():
    """(sender, path) of every complete file waiting in the inbox, oldest name first."""
    found = []
    for entry in sorted(os.listdir(INBOX)):
        path = os.path.join(INBOX, entry)
        if is_hidden(entry):
            continue
        if os.path.isdir(path):
            found += [(entry, os.path.join(path, name)) for name in sorted(os.listdir(path))
                      if wanted(name) and os.path.isfile(os.path.join(path, name))]
        elif wanted(entry):
            found.append((settings["sender"], path))
    return found


def is_hidden(name: str) -> bool:
    return name.startswith(".") or name.endswith(".part")


def wanted(name: str) -> bool:
    return not is_hidden(name) and os.path.splitext(name)[1] in settings["extensions"]


def take_in(sender: str, path: str) -> None:
    stat = os.stat(path)
    name = os.path.basename(path)
    if stat.st_size > settings["max_bytes"]:
        return reject(path, f"{stat.st_size} bytes is over max_bytes {settings['max_bytes']}")
    with open(path, "rb") as source:
        text = source.read().decode("utf-8", "replace").strip()
    if not text:
        return reject(path, "the file is empty")
    message = types.InboundMessage(
        sender=sender,
        conversation=os.path.splitext(name)[0],
        payload=json.dumps({"text": text, "file": name}),
        priority=None,
        # The same file, unchanged, is the same message however often it is pushed.
        dedup_key=f"{sender}/{name}:{stat.st_size}:{stat.st_mtime_ns}",
        # Said when it was written (a clock ahead of the host's counts as now).
        said_at=min(stat.st_mtime_ns // 1_000_000, int(time.time() * 1000)),
    )
    try:
        message_id = buffer.push(message)
    except Err as error:
        return reject(path, f"the buffer refused it: {error.value!r}")
    move(path, os.path.join(PROCESSED, sender, name))
    info(f"{sender}/{name} is message #{message_id}")


def reject(path: str, why: str) -> None:
    warn(f"{path} rejected: {why}; moved to {REJECTED}")
    move(path, os.path.join(REJECTED, os.path.basename(path)))


def move(path: str, to: str) -> None:
    """Move a file, keeping an earlier file of the same name (suffix .1, .2, ...)."""
    ensure_dir(os.path.dirname(to))
    target, n = to, 0
    while os.path.exists(target):
        n += 1
        target = f"{to}.{n}"
    os.rename(path, target)


def ensure_dir(path: str) -> None:
    """Create `path` and its missing parents below the granted folder it lies in (the
    sandbox's `/` is not a directory the plugin can see, so os.makedirs cannot be used)."""
    granted, *below = path.strip("/").split("/")
    current = "/" + granted
    for part in below:
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)


def safe_name(conversation: str) -> str:
    kept = "".join(c if c.isalnum() or c in "-_." else "_" for c in conversation)
    return kept.strip(".") or "conversation"
