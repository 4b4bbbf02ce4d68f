"""The inline reflection block: the reply's `<memory_reflection>{json}</memory_reflection>`.

The model may end its reply with one such block (`REFLECTION_INSTRUCTIONS` asks for it); the
plugin removes it before the reply is sent (`split_reflection`) and hands it to scopemem's
reflection path (`/v1/events/after_message_sent`). Only the fields scopemem accepts are kept,
since it refuses unknown ones.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

REFLECTION_RE = re.compile(r"<memory_reflection>(.*?)</memory_reflection>", re.DOTALL)

# Append this to the system prompt, on every turn (it never changes, so the prompt stays the same
# from turn to turn), to ask for reflections on the memories recalled for the turn. It names no
# tag of the block: a prompt holds `<memory_context>` only when memories were recalled.
REFLECTION_INSTRUCTIONS = """
<memory_reflection_instructions>
After your reply you may append ONE block <memory_reflection>{...}</memory_reflection> holding a
JSON object with any of: "useful_memory_ids" (ids of the recalled memories shown to you that
helped), "new_memories" (list of {"content", "reasoning"?, "tags"?, "memory_type"?} worth
keeping long-term; memory_type is knowledge, event, skill, task or emotional). The block is removed
before the user sees the reply. Leave it out when there is nothing to record.
</memory_reflection_instructions>
""".strip()


def clean_reflection(raw: Any) -> Optional[dict[str, Any]]:
    """Keep only the fields scopemem's reflection accepts; None when nothing is left."""
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {}
    ids = raw.get("useful_memory_ids")
    if isinstance(ids, list):
        out["useful_memory_ids"] = [str(i) for i in ids if isinstance(i, (str, int))]
    news = raw.get("new_memories")
    if isinstance(news, list):
        kept = []
        for m in news:
            if isinstance(m, str) and m.strip():
                kept.append({"content": m})
            elif isinstance(m, dict) and isinstance(m.get("content"), str):
                item: dict[str, Any] = {"content": m["content"]}
                if isinstance(m.get("reasoning"), str):
                    item["reasoning"] = m["reasoning"]
                if isinstance(m.get("tags"), list):
                    item["tags"] = [str(t) for t in m["tags"]]
                if isinstance(m.get("memory_type"), str):
                    item["memory_type"] = m["memory_type"]
                kept.append(item)
        out["new_memories"] = kept
    groups = raw.get("merge_groups")
    if isinstance(groups, list):
        out["merge_groups"] = [[str(i) for i in g] for g in groups if isinstance(g, list)]
    return out if any(out.values()) else None


def split_reflection(text: str) -> tuple[str, Optional[dict[str, Any]]]:
    """Remove every reflection block from a reply: (visible reply, last valid reflection)."""
    reflection = None
    for block in REFLECTION_RE.findall(text):
        try:
            parsed = clean_reflection(json.loads(block))
        except ValueError:
            parsed = None
        if parsed is not None:
            reflection = parsed
    visible = REFLECTION_RE.sub("", text).strip()
    return visible, reflection
