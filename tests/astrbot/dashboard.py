"""Run a real AstrBot 4.29.0 with its dashboard on, the scopemem plugin loaded, for the browser
test of the plugin's memory page (tests/astrbot_dashboard.rs).

    python dashboard.py --root DIR --plugin-src integrations/astrbot --port PORT \
        --password-file FILE --plugin-config FILE

AstrBot runs as its own launcher runs it (core lifecycle plus the dashboard server, the way
astrbot.core.initial_loader does), with everything under --root (ASTRBOT_ROOT): data/
cmd_config.json holds the dashboard's host (loopback), port, user and a PBKDF2 hash of the
password read from --password-file (so the password is never on a command line), in AstrBot's
own format, and the plugin config is --plugin-config's JSON. The plugin folder is
copied into data/plugins, as an operator installs it. No LLM provider is configured: the page
never needs one. Prints "@@DASHBOARD PLUGIN <json>" once the plugin is loaded (or
"@@DASHBOARD FAILED <why>") and runs until killed; AstrBot's own output goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import shutil
import sys
import traceback

PLUGIN_DIR = "astrbot_plugin_scopemem"
USERNAME = "scopemem-admin"


def say(kind: str, payload: object) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    sys.__stdout__.write(f"@@DASHBOARD {kind} {text}\n")
    sys.__stdout__.flush()


def hash_password(password: str) -> tuple[str, str]:
    """The dashboard password as AstrBot 4.29.0 stores it (astrbot.core.utils.auth_password):
    `pbkdf2_sha256$600000$<salt hex>$<digest hex>`, and the MD5 it keeps beside it. Made here
    rather than imported: importing any astrbot module loads cmd_config.json at once, before
    this script has written it."""
    salt = secrets.token_hex(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), 600_000)
    md5 = hashlib.md5(password.encode()).hexdigest()
    return f"pbkdf2_sha256$600000${salt}${digest.hex()}", md5


def prepare_root(root: str, plugin_src: str, port: int, password: str, plugin_config: dict) -> None:
    pbkdf2, md5 = hash_password(password)
    data = os.path.join(root, "data")
    os.makedirs(os.path.join(data, "plugins"), exist_ok=True)
    os.makedirs(os.path.join(data, "config"), exist_ok=True)
    dest = os.path.join(data, "plugins", PLUGIN_DIR)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(plugin_src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    cmd_config = {
        "dashboard": {
            "enable": True,
            "host": "127.0.0.1",
            "port": port,
            "username": USERNAME,
            "pbkdf2_password": pbkdf2,
            "password": md5,
            "password_storage_upgraded": True,
            "password_change_required": False,
            "jwt_secret": secrets.token_hex(32),
        },
        "provider": [],
        "platform": [],
    }
    with open(os.path.join(data, "cmd_config.json"), "w", encoding="utf-8") as f:
        json.dump(cmd_config, f, ensure_ascii=False, indent=2)
    with open(
        os.path.join(data, "config", f"{PLUGIN_DIR}_config.json"), "w", encoding="utf-8"
    ) as f:
        json.dump(plugin_config, f, ensure_ascii=False)


async def run(args: argparse.Namespace) -> None:
    root = os.path.realpath(args.root)
    with open(args.password_file, encoding="utf-8") as f:
        password = f.read().strip()
    with open(args.plugin_config, encoding="utf-8") as f:
        plugin_config = json.load(f)
    # AstrBot resolves every path from ASTRBOT_ROOT when its modules are first imported (its
    # config path is a module constant), so the root is set before any astrbot import; it
    # imports plugins as data.plugins.<dir>.main, so the root also goes first on sys.path.
    plugin_src = os.path.realpath(args.plugin_src)
    os.makedirs(root, exist_ok=True)
    os.environ["ASTRBOT_ROOT"] = root
    os.chdir(root)
    sys.path.insert(0, root)
    # The `scopemem` Python package the plugin imports (python/), from this checkout.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    prepare_root(root, plugin_src, args.port, password, plugin_config)

    from astrbot.core import LogBroker, db_helper
    from astrbot.core.core_lifecycle import AstrBotCoreLifecycle
    from astrbot.dashboard.server import AstrBotDashboard

    lifecycle = AstrBotCoreLifecycle(LogBroker(), db_helper)
    await lifecycle.initialize()
    core = lifecycle.start()
    dashboard = AstrBotDashboard(lifecycle, db_helper, lifecycle.dashboard_shutdown_event)
    serving = dashboard.run()
    if serving is None:
        raise RuntimeError("AstrBot's dashboard is disabled")
    plugin = next(
        (s for s in lifecycle.plugin_manager.context.get_all_stars() if s.name == PLUGIN_DIR),
        None,
    )
    if plugin is None:
        failed = getattr(lifecycle.plugin_manager, "failed_plugin_dict", {})
        raise RuntimeError(f"AstrBot did not load {PLUGIN_DIR}; failed: {failed}")
    routes = [r[0] for r in lifecycle.star_context.registered_web_apis]
    say(
        "PLUGIN",
        {
            "module": plugin.module_path,
            "activated": plugin.activated,
            "web_apis": routes,
            "username": USERNAME,
        },
    )
    await asyncio.gather(core, serving)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--plugin-src", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--plugin-config", required=True)
    args = parser.parse_args()
    # AstrBot logs to stdout; keep stdout for the protocol.
    sys.stdout = sys.stderr
    try:
        asyncio.run(run(args))
    except BaseException:
        traceback.print_exc()
        say("FAILED", traceback.format_exc().splitlines()[-1])
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
