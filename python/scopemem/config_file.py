"""scopemem's JSON config file as a plugin reads and writes it.

scopemem hot-reloads its config file, so writing it is how a plugin maps a chat or makes it
incognito while everything runs. A write replaces the file whole or not at all (a temp file in
the same directory, fsync, rename, fsync of the directory), so the server's reload never reads
half a file; the operator's permissions on it are kept (it may hold an auth token). Scope names
are checked against scopemem's own rule before anything is written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

# scopemem's rule for scope names (crates/core/src/scope/name.rs): ^[A-Za-z0-9\u4e00-\u9fff_-]{1,64}$
SCOPE_NAME_RE = re.compile(r"[A-Za-z0-9\u4e00-\u9fff_-]{1,64}")


def valid_scope_name(name: str) -> bool:
    return SCOPE_NAME_RE.fullmatch(name) is not None


def read(path: Path) -> dict[str, Any]:
    """The config as an object; {} for a missing file; ValueError for anything unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        got = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path.name} is not valid JSON ({e})") from None
    if not isinstance(got, dict):
        raise ValueError(f"{path.name} does not hold a JSON object")
    return got


def write_atomically(path: Path, config: dict[str, Any], replace: bool = True) -> None:
    """Write `config` to `path` whole or not at all; with `replace=False` an existing file is
    kept and FileExistsError raised (a hard link of the finished temp file, which never
    replaces anything)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        if not replace:
            try:
                os.link(tmp, path)  # FileExistsError when a file is there
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links: check, then rename
                if path.exists():
                    raise FileExistsError(str(path)) from None
                os.replace(tmp, path)
            else:
                os.unlink(tmp)
        else:
            try:  # keep the operator's permissions (the file may hold an auth token)
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            except FileNotFoundError:
                pass
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
