"""The `scopemem serve` a plugin runs itself, under the bot, so the bot is the one process to
manage (scopemem embeds in-process: there is no embedding server beside it).

The child does not outlive the bot, even a kill -9 of it: it runs as `<binary> serve
--exit-with-parent --config FILE` with stdin a pipe nothing is written to (its end closes when
the bot dies). A child that exits is restarted after 1 s, doubling to 30 s (reset after a
minute of uptime).

`stop()` asks the child to drain and flush, then waits up to 15 s before a hard kill. On POSIX
the request is SIGTERM. On Windows there is no SIGTERM: `Process.terminate()` is
TerminateProcess, a hard kill, and scopemem's ctrl-c handler takes only CTRL_C, which cannot be
sent to one child alone. So there the supervisor closes the child's stdin: `--exit-with-parent`
reads the end of stdin as "the parent is gone" and stops exactly as on SIGTERM (drain, flush,
exit 0). `find_binary` looks where pip puts the wheel's binary on either: `<prefix>/bin/scopemem`,
or `<prefix>\\Scripts\\scopemem.exe` on Windows. Both take the platform as an argument so
that tests on Linux check the Windows path.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from ._log import logger_or_default

def free_loopback_port() -> int:
    """A loopback port nobody listens on right now, for a child that starts now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def addr_taken(addr: str) -> bool:
    """Whether another program already listens on `addr` (`host:port`, as the config's
    `server.http_addr` names it): binding it fails the way scopemem's own bind would. False
    when the address cannot be checked here (a host name): scopemem then says why it fails."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            if sys.platform != "win32":  # as Rust's TcpListener::bind does
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, number))
    except (OSError, ValueError) as e:
        return isinstance(e, OSError) and not isinstance(e, socket.gaierror)
    return False


# How long a child has to drain after the stop request before it is killed.
STOP_WAIT_S = 15.0


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def binary_name(platform: Optional[str] = None) -> str:
    """The file name of the scopemem binary on `platform` (`sys.platform` by default)."""
    return "scopemem.exe" if (platform or sys.platform) == "win32" else "scopemem"


def find_binary(
    configured: str = "",
    *,
    prefix: Optional[str] = None,
    executable: Optional[str] = None,
    extra_dirs: Sequence[str] = (),
    path: Optional[str] = None,
    platform: Optional[str] = None,
) -> Optional[str]:
    """The `scopemem` to run: `configured` if set; else the one pip put beside this Python
    (the environment's scripts directory: `<prefix>/bin/scopemem`, or on Windows
    `<prefix>\\Scripts\\scopemem.exe`, then the directory of `sys.executable`); else one in
    a `--target` install (`extra_dirs`, their `bin/` or `Scripts\\`); else the first on `PATH`;
    else None. Every argument but `configured` defaults to this interpreter and is there for
    tests."""
    if configured:
        return configured
    platform = platform or sys.platform
    name = binary_name(platform)
    prefix = sys.prefix if prefix is None else prefix
    executable = sys.executable if executable is None else executable
    scripts = ("Scripts", "bin") if platform == "win32" else ("bin",)
    candidates = [Path(prefix) / d / name for d in scripts]
    if executable:
        candidates.append(Path(executable).parent / name)
    candidates += [Path(d) / s / name for d in extra_dirs for s in scripts]
    for exe in candidates:
        if _executable(exe):
            return str(exe)
    return shutil.which(name, path=path)


class Supervisor:
    def __init__(
        self,
        argv: Sequence[str],
        extra_env: Optional[dict[str, str]] = None,
        logger: Optional[Any] = None,
        platform: Optional[str] = None,
    ) -> None:
        self.argv = list(argv)
        self.binary = self.argv[0]
        self.extra_env = dict(extra_env or {})
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.task: Optional[asyncio.Task] = None
        self.stopping = False
        self.starts = 0
        self.log = logger_or_default(logger)
        # Which stop request the child gets (see the module's docstring).
        self.platform = platform or sys.platform

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

    def request_stop(self, proc: Any) -> str:
        """Ask `proc` to drain and exit; returns how ("SIGTERM" or "stdin closed").

        Windows: close its stdin (`--exit-with-parent` stops as on SIGTERM);
        `terminate()` there would be a hard kill. Elsewhere: SIGTERM."""
        if self.platform == "win32":
            if proc.stdin is not None:
                proc.stdin.close()
            return "stdin closed"
        proc.terminate()  # SIGTERM: scopemem drains and flushes, then exits 0
        return "SIGTERM"

    async def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            how = self.request_stop(proc)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), timeout=STOP_WAIT_S)
        except asyncio.TimeoutError:
            self.log.warning(
                f"[scopemem] serve did not stop within {STOP_WAIT_S:.0f} s of {how}; killing it"
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
