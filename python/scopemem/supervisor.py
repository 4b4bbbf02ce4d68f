"""The `scopemem serve` a plugin runs itself, under the bot, so the bot is the one process to
manage (scopemem embeds in-process: there is no embedding server beside it).

The child does not outlive the bot, even a kill -9 of it: it runs as `<binary> serve
--exit-with-parent --config FILE` with stdin a pipe nothing is written to (its end closes when
the bot dies). A child that exits is restarted after 1 s, doubling to 30 s (reset after a
minute of uptime); `stop()` sends SIGTERM, which makes scopemem drain and flush.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Optional, Sequence

from ._log import logger_or_default


class Supervisor:
    def __init__(
        self,
        argv: Sequence[str],
        extra_env: Optional[dict[str, str]] = None,
        logger: Optional[Any] = None,
    ) -> None:
        self.argv = list(argv)
        self.binary = self.argv[0]
        self.extra_env = dict(extra_env or {})
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.task: Optional[asyncio.Task] = None
        self.stopping = False
        self.starts = 0
        self.log = logger_or_default(logger)

    def start(self) -> None:
        self.stopping = False
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
                    *self.argv, env=env, stdin=asyncio.subprocess.PIPE
                )
                self.starts += 1
                self.log.info(f"[scopemem] started {self.binary} (pid {self.proc.pid})")
                code = await self.proc.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a missing binary, a bad path, ...
                code = None
                self.log.error(f"[scopemem] could not start {self.binary}: {e}")
            if self.stopping:
                return
            if time.monotonic() - started > 60:
                backoff = 1.0
            self.log.warning(
                f"[scopemem] serve exited (code {code}); restarting in {backoff:.0f} s"
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.terminate()  # SIGTERM: scopemem drains and flushes, then exits 0
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), timeout=15)
        except asyncio.TimeoutError:
            self.log.warning(
                "[scopemem] serve did not stop within 15 s of SIGTERM; killing it"
            )
            proc.kill()
            await proc.wait()

    async def stop(self) -> None:
        self.stopping = True
        await self._terminate()
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
        # A child started while the task was being cancelled goes the same way.
        await self._terminate()
        if self.proc is not None:
            self.log.info(f"[scopemem] serve stopped (code {self.proc.returncode})")
