"""What the plugin needs to run scopemem itself when nothing else is set up (no `scopemem_url`).

Installing the scopemem wheel into the bot's environment should be the whole set-up, as for
the AstrBot plugin: this module finds the `scopemem` binary the wheel put beside the bot's
Python and, on the first start, creates scopemem's config file under the plugin's data dir
(its table beside it, a free loopback port). An existing file is the operator's and the
`/scopemem map` commands' file, so it is never rewritten here; the plugin reaches the server
at whatever `server.http_addr` it names. That port is then a fixed one: when another program
holds it, the plugin says so and runs nothing (`scopemem.supervisor.addr_taken`), rather than restarting a server
that cannot listen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from scopemem import supervisor
from scopemem.config_file import write_atomically

# What the plugin logs (and `/scopemem status` shows) when it should run scopemem but cannot
# find it.
NO_BINARY = (
    "no scopemem binary found: install the scopemem wheel into the bot's environment "
    "(pip install scopemem-*.whl) or set SCOPEMEM_BINARY / SCOPEMEM_URL"
)


def find_binary(
    configured: str,
    prefix: Optional[str] = None,
    executable: Optional[str] = None,
    path: Optional[str] = None,
    platform: Optional[str] = None,
) -> Optional[str]:
    """The `scopemem` to run: `configured` if set; else the one the wheel installed beside
    this Python (`<sys.prefix>/bin/scopemem`, or `<sys.prefix>\\Scripts\\scopemem.exe` on
    Windows, then the directory of `sys.executable`); else the first on `PATH`; else None
    (`scopemem.supervisor.find_binary`). The arguments other than `configured` are for tests."""
    return supervisor.find_binary(
        configured, prefix=prefix, executable=executable, path=path, platform=platform
    )


def initial_config(data_dir: Path) -> dict[str, Any]:
    """The file written on the first start: the table under the data dir, a loopback port."""
    return {
        "storage": {"db_dir": str(data_dir / "lancedb")},
        "server": {"http_addr": f"127.0.0.1:{supervisor.free_loopback_port()}"},
    }


def ensure_config(path: Path, data_dir: Path) -> bool:
    """Create scopemem's config at `path` unless a file is there; True when it was created.

    Created atomically and without ever replacing a file (another process may create it at
    the same moment: then that one is kept).
    """
    if path.exists():
        return False
    try:
        write_atomically(path, initial_config(data_dir), replace=False)
    except FileExistsError:
        return False
    return True
