"""A plugin with one LLM tool that sends its result to the chat directly: tests/astrbot/scenario.py
installs it beside scopemem's, so that a model's tool call makes AstrBot send a tool's own text
(``FunctionToolExecutor._execute_local`` sends a ``tool_direct_result`` chain), which is the bot's
words in the chat as much as the model's reply is."""

from astrbot.api.event import AstrMessageEvent, filter
from astrbot.api.star import Context, Star, register

# What the tool sends to the chat.
DIRECT_TEXT = "Here is the weekly rota card: Mon Ann, Tue Bo, Wed Cy."


@register("astrbot_plugin_direct_tool", "scopemem tests", "A tool that answers directly", "0.1.0")
class DirectToolPlugin(Star):
    def __init__(self, context: Context) -> None:
        super().__init__(context)

    @filter.llm_tool(name="send_rota_card")
    async def send_rota_card(self, event: AstrMessageEvent):
        """Send the weekly rota card to the chat."""
        yield event.plain_result(DIRECT_TEXT)
