"""The plugin's settings, read from NoneBot's driver config (`.env`, environment, `nonebot.init`).

Kept apart so the settings are one plain pydantic model that `nonebot.get_plugin_config`
fills, and so the README's list of keys has one place to match.
"""

from pydantic import BaseModel


class Config(BaseModel):
    # Where `scopemem serve` answers. When the plugin supervises scopemem (`scopemem_binary`)
    # and this is not set, the address comes from `server.http_addr` in `scopemem_config`.
    scopemem_url: str = "http://127.0.0.1:8787"
    # Sent as `Authorization: Bearer …` (scopemem's `server.auth_token`); empty: no header.
    scopemem_token: str = ""
    # Seconds one request to scopemem may take before the bot goes on without memory.
    scopemem_timeout: float = 3.0
    # Optional: run `<binary> serve --exit-with-parent --config <scopemem_config>` as a child.
    scopemem_binary: str = ""
    # scopemem's JSON config, which `/scopemem map|unmap|incognito` edit (and the child uses).
    scopemem_config: str = ""
