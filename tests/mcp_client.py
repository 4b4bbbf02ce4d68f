"""A real MCP client session against scopemem, with the official Python `mcp` SDK.

Run by tests/mcp.rs with the venv from scripts/setup-mcp-client.sh:
  mcp_client.py stdio --server BIN --config FILE [--bench N]
  mcp_client.py http --url http://127.0.0.1:PORT/mcp
Prints one JSON line on stdout at the end: {"ok": true, "remembered": <rows written>, ...};
any failed check raises, so the exit code is non-zero.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

FAMILY = "default:GroupMessage:12345"  # mapped to 家人 by the test config
UNMAPPED = "default:GroupMessage:99999"  # not in the map: unmapped policy -> public
REMEMBER = "core_memory_remember"
RECALL = "core_memory_recall"

# The stdio client passes only a minimal environment; the server needs the offline model paths.
PASS_ENV = ("ORT_DYLIB_PATH", "SCOPEMEM_MODEL_DIR", "SCOPEMEM_ASSETS", "RUST_LOG")


def log(*a):
    print("[mcp_client]", *a, file=sys.stderr, flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def payload(result):
    """The JSON a successful call returned (text content; structured content must agree)."""
    check(not result.is_error, f"tool call failed: {text_of(result)}")
    data = json.loads(text_of(result))
    if result.structured_content is not None:
        check(result.structured_content == data, "structured content differs from the text")
    return data


async def remember(client, meta, content, **extra):
    return await client.call_tool(REMEMBER, {"content": content, **extra}, meta=meta)


async def recall(client, meta, query):
    r = payload(await client.call_tool(RECALL, {"query": query, "limit": 100}, meta=meta))
    return r["memory_scope"], [m["content"] for m in r["memories"]]


async def check_tools(client):
    tools = (await client.list_tools()).tools
    names = sorted(t.name for t in tools)
    check(names == [RECALL, REMEMBER, "core_memory_update"], f"tools: {names}")
    for t in tools:
        schema = json.dumps(t.input_schema).lower()
        check("scope" not in schema and "conversation" not in schema, f"{t.name} schema: {schema}")
        check(t.description, f"{t.name} has no description")


async def scenario(client, tag):
    """Scope isolation through MCP. Returns how many rows it wrote."""
    fam = {"conversation_id": FAMILY}
    unm = {"conversation_id": UNMAPPED}
    family_fact = f"[{tag}] Grandma's birthday dinner is on May 3rd at the dumpling place"
    public_fact = f"[{tag}] The team standup moved to 9:30 on weekdays"
    vscode_fact = f"[{tag}] Uncle Li is allergic to peanuts"
    orphan = f"[{tag}] this must never be stored anywhere"

    m = payload(await remember(client, fam, family_fact, tags=["grandma"]))["memory"]
    check(m["memory_scope"] == "家人" and m["scope_source"] == "conversation", f"family write: {m}")
    m = payload(await remember(client, unm, public_fact))["memory"]
    check(m["memory_scope"] == "public" and m["scope_source"] == "unmapped", f"unmapped write: {m}")
    # VS Code's key names the conversation just as well.
    m = payload(await remember(client, {"vscode.conversationId": FAMILY}, vscode_fact))["memory"]
    check(m["memory_scope"] == "家人", f"vscode write: {m}")
    written = 3

    scope, seen = await recall(client, fam, "family birthday dinner")
    check(scope == "家人", f"family scope {scope}")
    check(family_fact in seen and vscode_fact in seen and public_fact in seen, f"family sees {seen}")
    scope, seen = await recall(client, unm, "family birthday dinner")
    check(scope == "public", f"unmapped scope {scope}")
    check(public_fact in seen, f"unmapped sees {seen}")
    check(family_fact not in seen and vscode_fact not in seen, f"family memory leaked: {seen}")
    scope, seen = await recall(client, {"vscode.conversationId": FAMILY}, "peanut allergy")
    check(scope == "家人" and vscode_fact in seen and family_fact in seen, f"vscode recall {seen}")

    # No conversation id: a clear tool error, nothing written.
    for meta in (None, {}, {"persona": "Alice"}, {"conversationId": FAMILY}):
        r = await remember(client, meta, orphan)
        check(r.is_error, f"write without conversation id succeeded (meta={meta})")
        t = text_of(r)
        check("missing_conversation_id" in t and "conversation_id" in t, f"unclear error: {t}")
    r = await client.call_tool(RECALL, {"query": "birthday"})
    check(r.is_error and "missing_conversation_id" in text_of(r), "recall without conversation id")
    # An invalid id is refused by the memory layer; a non-string one by the MCP layer.
    for meta, code in (
        ({"conversation_id": "   "}, "invalid_conversation_id"),
        ({"conversation_id": "a\u0007b"}, "invalid_conversation_id"),
        ({"conversation_id": "x" * 600}, "invalid_conversation_id"),
        ({"conversation_id": 12345}, "invalid_meta"),
    ):
        r = await remember(client, meta, orphan)
        check(r.is_error and code in text_of(r), f"{meta}: {text_of(r)}")
    # The model cannot steer a memory into a scope through arguments.
    r = await remember(client, unm, orphan, memory_scope="家人")
    check(r.is_error and "invalid_arguments" in text_of(r), f"scope argument: {text_of(r)}")
    r = await client.call_tool(RECALL, {"query": "x", "conversation_id": FAMILY}, meta=unm)
    check(r.is_error and "invalid_arguments" in text_of(r), f"conversation argument: {text_of(r)}")
    # An unknown tool is a protocol error.
    try:
        await client.call_tool("core_memory_forget_everything", {}, meta=fam)
        check(False, "unknown tool accepted")
    except MCPError as e:
        log("unknown tool ->", e.error.code, e.error.message)

    for meta in (fam, unm):
        _, seen = await recall(client, meta, "never stored anywhere")
        check(orphan not in seen, f"refused write was stored: {seen}")
    return written


async def bench(client, n):
    meta = {"conversation_id": FAMILY}
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        r = await client.call_tool(RECALL, {"query": f"birthday dinner {i}", "limit": 5}, meta=meta)
        times.append((time.perf_counter() - t0) * 1000)
        check(not r.is_error, text_of(r))
    times.sort()
    # tools/list does no memory work: its round trip is the protocol's own cost.
    bare = []
    for _ in range(n):
        t0 = time.perf_counter()
        await client.list_tools()
        bare.append((time.perf_counter() - t0) * 1000)
    return {
        "calls": n,
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (n - 1))], 2),
        "max_ms": round(times[-1], 2),
        "list_tools_p50_ms": round(statistics.median(bare), 2),
    }


def stdio_params(server, config):
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    return StdioServerParameters(command=server, args=["mcp", "--config", config], env=env)


async def run_stdio(args):
    out = {"ok": True, "remembered": 0}
    # The classic initialize handshake, as most clients in the field still do it.
    async with Client(stdio_params(args.server, args.config), mode="legacy", read_timeout_seconds=60) as c:
        check(c.server_info.name == "scopemem", f"server info {c.server_info}")
        check(c.server_info.version, "no server version")
        check("_meta" in (c.instructions or ""), f"instructions: {c.instructions}")
        out["protocol_version"] = c.protocol_version
        await check_tools(c)
        out["remembered"] += await scenario(c, "stdio")
        if args.bench:
            out["bench_recall_stdio"] = await bench(c, args.bench)
    # A second process on the same store, negotiating the way current SDK clients do by default
    # (server/discover when the server offers it): what the first one wrote is still scoped.
    async with Client(stdio_params(args.server, args.config), read_timeout_seconds=60) as c:
        out["auto_protocol_version"] = c.protocol_version
        await check_tools(c)
        _, seen = await recall(c, {"conversation_id": FAMILY}, "birthday dinner")
        check(any("Grandma" in s for s in seen), f"restart lost memories: {seen}")
        _, seen = await recall(c, {"conversation_id": UNMAPPED}, "birthday dinner")
        check(not any("Grandma" in s for s in seen), f"family memory leaked after restart: {seen}")
    return out


async def run_http(args):
    out = {"ok": True, "remembered": 0}
    async with Client(args.url, read_timeout_seconds=60) as c:
        out["protocol_version"] = c.protocol_version
        await check_tools(c)
        out["remembered"] += await scenario(c, "http")
    async with Client(args.url, mode="legacy", read_timeout_seconds=60) as c:
        out["legacy_protocol_version"] = c.protocol_version
        check(c.server_info.name == "scopemem", f"server info {c.server_info}")
        _, seen = await recall(c, {"conversation_id": FAMILY}, "birthday dinner")
        check(any("Grandma" in s for s in seen), f"http legacy recall: {seen}")
    return out


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("stdio")
    s.add_argument("--server", required=True)
    s.add_argument("--config", required=True)
    s.add_argument("--bench", type=int, default=0)
    h = sub.add_parser("http")
    h.add_argument("--url", required=True)
    args = p.parse_args()
    out = asyncio.run(run_stdio(args) if args.mode == "stdio" else run_http(args))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
