"""Events and process checks shared by the pytest suite (conftest.py) and the real bot process
it starts (supervised_bot.py): OneBot v11 events as the adapter builds them from a message, and
/proc readings of which processes are still alive.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from nonebot.adapters.onebot.v11 import GroupMessageEvent, Message, PrivateMessageEvent
from nonebot.adapters.onebot.v11.event import Sender

USER_ID = 20000  # an ordinary group member, not a superuser
_message_ids = itertools.count(1)


def _fields(user_id: int, text: str) -> dict:
    return dict(
        time=int(time.time()),
        self_id=1,
        post_type="message",
        user_id=user_id,
        message_id=next(_message_ids),
        message=Message(text),
        original_message=Message(text),
        raw_message=text,
        font=0,
        sender=Sender(user_id=user_id, nickname=f"user{user_id}"),
    )


def group_event(group_id: int, text: str = "hello", user_id: int = USER_ID) -> GroupMessageEvent:
    return GroupMessageEvent(
        **_fields(user_id, text),
        sub_type="normal",
        message_type="group",
        to_me=False,
        group_id=group_id,
    )


def private_event(user_id: int, text: str = "hello") -> PrivateMessageEvent:
    return PrivateMessageEvent(
        **_fields(user_id, text), sub_type="friend", message_type="private", to_me=True
    )


def _stat(pid: int | str) -> list[str] | None:
    """A process's /proc stat fields after its name: [state, ppid, ...]; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def live_children(pid: int) -> list[int]:
    """Live (not zombie) child processes of `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"
