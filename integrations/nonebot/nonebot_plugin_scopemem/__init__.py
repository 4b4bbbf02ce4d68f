"""nonebot-plugin-scopemem: scope-aware long-term memory for NoneBot2, over scopemem's HTTP API.

scopemem maps each chat (its conversation id, derived here from the event alone) to a scope
with the operator's `conversation_scope_map`; a memory written in one scope is recalled only
there, `public` ones everywhere. This package registers the `/scopemem` commands, sends
every chat message and the bot's own to scopemem's working memory (`working_memory.py`), runs
`scopemem serve` itself unless `scopemem_url` names a server the operator runs, and exports
the calls a bot's LLM handler makes:

    from nonebot import require
    require("nonebot_plugin_scopemem")
    from nonebot_plugin_scopemem import memory_context, split_reflection, after_reply

None of them raises into the bot: with scopemem down, chatting goes on without memory.
"""

from nonebot import get_driver
from nonebot.plugin import PluginMetadata

from .config import Config
from .conversation import conversation_id
from .memory import after_reply, call_tool, memory_context, tools
from scopemem.reflection import REFLECTION_INSTRUCTIONS, split_reflection
from .runtime import get_runtime

__plugin_meta__ = PluginMetadata(
    name="scopemem",
    description="Scope-aware long-term memory: the family group's memories never surface in the work group",
    usage=(
        "/scopemem status | map <scope> | unmap | incognito on|off | forget [confirm] | "
        "me | forget me [confirm]\n"
        "In your LLM handler: memory_context(event, query) before the model, "
        "split_reflection(reply) and after_reply(...) after it; tools() / call_tool(...) "
        "for function calling."
    ),
    type="application",
    homepage="https://github.com/scopemem/scopemem",
    config=Config,
    supported_adapters=None,
)

from . import commands as commands  # noqa: E402,F401  (registers the matchers)
from . import working_memory as working_memory  # noqa: E402,F401  (its matcher and API hook)

_driver = get_driver()
get_runtime()  # read the settings now, so a bad value fails at load time


@_driver.on_startup
async def _start_scopemem() -> None:
    await get_runtime().start()


@_driver.on_shutdown
async def _stop_scopemem() -> None:
    await get_runtime().stop()


__all__ = [
    "Config",
    "REFLECTION_INSTRUCTIONS",
    "after_reply",
    "call_tool",
    "conversation_id",
    "memory_context",
    "split_reflection",
    "tools",
]
