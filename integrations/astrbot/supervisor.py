"""The `scopemem serve` the plugin runs itself (when no scopemem_url is set), restarted with
backoff while AstrBot runs, and never outliving it.
"""

from __future__ import annotations

import asyncio
import os
import time

from astrbot.api import logger


class Supervisor:
    """Runs `scopemem serve`, restarting it with backoff. It does not outlive AstrBot, even a
    kill -9 of it: it is started with `--exit-with-parent` and a stdin pipe nothing writes to
    (its end closes when AstrBot dies). scopemem embeds in-process, so it is the only child."""

    def __init__(self, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.binary = argv[0]
        self.extra_env = extra_env or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.task: asyncio.Task | None = None
        self.stopping = False

    def start(self) -> None:
        name = os.path.basename(self.binary)
        self.task = asyncio.create_task(self._run(), name=f"scopemem_supervisor_{name}")

    async def _run(self) -> None:
        backoff = 1.0
        env = dict(os.environ)
        env.update(self.extra_env)
        while not self.stopping:
            started = time.monotonic()
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    env=env,
                    stdin=asyncio.subprocess.PIPE,
                )
                logger.info("[scopemem] started %s (pid %s)", self.binary, self.proc.pid)
                code = await self.proc.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a missing binary, a bad path, ...
                code = None
                logger.error("[scopemem] could not start %s: %s", self.binary, e)
            if self.stopping:
                return
            if time.monotonic() - started > 60:
                backoff = 1.0
            logger.warning(
                "[scopemem] %s exited (code %s); restarting in %.0f s",
                os.path.basename(self.binary),
                code,
                backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def stop(self) -> None:
        self.stopping = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()  # SIGTERM: scopemem drains and flushes, then exits 0
            try:
                await asyncio.wait_for(proc.wait(), timeout=15)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
