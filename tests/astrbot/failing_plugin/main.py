"""A plugin whose one command always raises: tests/astrbot/scenario.py installs it beside
scopemem's so that AstrBot answers a chat with its own error text, as it does for any plugin
whose handler fails (``StarRequestSubStage.process``: ":( 在调用插件 … 时出现异常：…")."""

from astrbot.api.event import AstrMessageEvent, filter
from astrbot.api.star import Context, Star, register

# What the command raises; AstrBot puts it into its error reply.
BOOM = "the failing plugin failed on purpose"


@register("astrbot_plugin_failing", "scopemem tests", "A command that always fails", "0.1.0")
class FailingPlugin(Star):
    def __init__(self, context: Context) -> None:
        super().__init__(context)

    @filter.command("boom")
    async def boom(self, event: AstrMessageEvent):
        """Always raises."""
        raise RuntimeError(BOOM)
        yield  # an async generator, as a command that answers is
