#!/usr/bin/env python3
"""Checks benches/group_chat/chat.json and prints its counts.

    python3 benches/group_chat/check.py [path/to/chat.json]

Exits 0 when the file is well formed and meets the minimums below, 1 (after listing every
problem found) when it is not. Standard library only.
"""
import json
import os
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime, timedelta

KINDS = ["fact", "restatement", "chatter", "sticker", "ack", "question", "bot"]
LANGS = {"zh", "en"}
MIN = {
    "chats": 4,
    "group chats": 3,
    "private chats": 1,
    "messages": 650,
    "English messages": 150,
    "facts": 36,
    "English facts": 8,
    "private facts": 2,
    "sensitive private facts": 1,
    "restated facts": 18,
    "invented bot lines": 3,
    "small_talk lines": 20,
}
MEMBERS_PER_GROUP = (4, 7)
TZ = timedelta(hours=8)
MSG_FIELDS = {"id": str, "conversation_id": str, "sender_id": str, "sender_name": str,
              "text": str, "sent_at": str, "is_bot": bool, "kind": str}
FACT_FIELDS = {"id": str, "conversation_id": str, "message": str, "question": str, "lang": str}
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")

errors = []


def err(msg):
    errors.append(msg)


def parse_time(s, where):
    try:
        t = datetime.fromisoformat(s)
    except (TypeError, ValueError):
        err(f"{where}: sent_at {s!r} is not an ISO 8601 time")
        return None
    if t.utcoffset() != TZ:
        err(f"{where}: sent_at {s!r} is not in +08:00")
        return None
    return t


def check_fields(obj, fields, where):
    ok = True
    for name, typ in fields.items():
        if name not in obj:
            err(f"{where}: missing field {name!r}")
            ok = False
        elif not isinstance(obj[name], typ):
            err(f"{where}: field {name!r} should be {typ.__name__}, got {type(obj[name]).__name__}")
            ok = False
        elif typ is str and not obj[name].strip():
            err(f"{where}: field {name!r} is empty")
            ok = False
    return ok


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"FAIL: cannot read {path} as JSON: {e}", file=sys.stderr)
        return 1
    if not isinstance(data, dict):
        print("FAIL: top level is not a JSON object", file=sys.stderr)
        return 1
    for key in ("chats", "messages", "facts", "small_talk"):
        if not isinstance(data.get(key), list):
            err(f"top level: {key!r} missing or not a list")
    if errors:
        return report(None)

    # chats
    chats = {}
    for i, c in enumerate(data["chats"]):
        where = f"chats[{i}]"
        if not isinstance(c, dict) or not check_fields(c, {"conversation_id": str, "name": str, "lang": str, "kind": str}, where):
            continue
        cid = c["conversation_id"]
        if cid in chats:
            err(f"{where}: duplicate conversation_id {cid}")
        if c["lang"] not in LANGS:
            err(f"{where}: lang {c['lang']!r} not one of {sorted(LANGS)}")
        if c["kind"] == "group":
            if not cid.startswith("default:GroupMessage:"):
                err(f"{where}: group chat id {cid} should start with default:GroupMessage:")
        elif c["kind"] == "private":
            if not cid.startswith("default:FriendMessage:"):
                err(f"{where}: private chat id {cid} should start with default:FriendMessage:")
        else:
            err(f"{where}: kind {c['kind']!r} is neither group nor private")
        chats[cid] = c

    # messages
    msgs = {}
    last_in_chat = {}
    last_overall = None
    senders = defaultdict(dict)         # conversation -> sender_id -> sender_name
    times = {}
    for i, m in enumerate(data["messages"]):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not check_fields(m, MSG_FIELDS, where):
            continue
        where = f"message {m['id']}"
        if m["id"] in msgs:
            err(f"{where}: duplicate id")
        msgs[m["id"]] = m
        cid = m["conversation_id"]
        if cid not in chats:
            err(f"{where}: unknown conversation_id {cid}")
        kind = m["kind"]
        if kind not in KINDS:
            err(f"{where}: kind {kind!r} not one of {KINDS}")
        if m["is_bot"] != (kind == "bot"):
            err(f"{where}: is_bot is {m['is_bot']} but kind is {kind}")
        if (m["sender_id"] == "bot") != m["is_bot"]:
            err(f"{where}: bot lines (and only they) must have sender_id 'bot'")
        if kind in ("fact", "restatement"):
            if not isinstance(m.get("fact"), str):
                err(f"{where}: a {kind} message needs a 'fact' field")
        elif "fact" in m:
            err(f"{where}: only fact and restatement messages may carry 'fact'")
        if "invented" in m and (kind != "bot" or m["invented"] is not True):
            err(f"{where}: 'invented' must be true and only on bot lines")
        prev = senders[cid].setdefault(m["sender_id"], m["sender_name"])
        if prev != m["sender_name"]:
            err(f"{where}: sender {m['sender_id']} is named {m['sender_name']!r} here but {prev!r} earlier in {cid}")
        t = parse_time(m["sent_at"], where)
        if t is None:
            continue
        times[m["id"]] = t
        if cid in last_in_chat and t <= last_in_chat[cid][1]:
            err(f"{where}: sent_at {m['sent_at']} is not after {last_in_chat[cid][0]} in the same chat")
        last_in_chat[cid] = (m["id"], t)
        if last_overall and t < last_overall[1]:
            err(f"{where}: messages are not in time order overall (after {last_overall[0]})")
        last_overall = (m["id"], t)

    # facts
    facts = {}
    for i, f in enumerate(data["facts"]):
        where = f"facts[{i}]"
        if not isinstance(f, dict) or not check_fields(f, FACT_FIELDS, where):
            continue
        where = f"fact {f['id']}"
        if f["id"] in facts:
            err(f"{where}: duplicate id")
        facts[f["id"]] = f
        if "restated_by" not in f:
            err(f"{where}: missing field 'restated_by' (use null when nobody restates it)")
        if f["conversation_id"] not in chats:
            err(f"{where}: unknown conversation_id {f['conversation_id']}")
        elif f["lang"] != chats[f["conversation_id"]]["lang"]:
            err(f"{where}: lang {f['lang']} differs from its chat's {chats[f['conversation_id']]['lang']}")
        if f["lang"] not in LANGS:
            err(f"{where}: lang {f['lang']!r} not one of {sorted(LANGS)}")
        if "sensitive" in f and f["sensitive"] is not True:
            err(f"{where}: 'sensitive' must be true when present")
        m = msgs.get(f["message"])
        if m is None:
            err(f"{where}: message {f['message']} does not exist")
            continue
        if m["kind"] != "fact":
            err(f"{where}: message {m['id']} is a {m['kind']}, not a fact")
        if m["conversation_id"] != f["conversation_id"]:
            err(f"{where}: message {m['id']} is in {m['conversation_id']}, not {f['conversation_id']}")
        if m.get("fact") != f["id"]:
            err(f"{where}: message {m['id']} points at fact {m.get('fact')}, not {f['id']}")
        if m["is_bot"]:
            err(f"{where}: stated by the bot, not by a member")
        rb = f.get("restated_by")
        if rb is not None:
            r = msgs.get(rb)
            if r is None:
                err(f"{where}: restated_by {rb} does not exist")
            elif r["kind"] != "restatement":
                err(f"{where}: restated_by {rb} is a {r['kind']}, not a restatement")
            elif r.get("fact") != f["id"]:
                err(f"{where}: restated_by {rb} points at fact {r.get('fact')}")

    # every fact/restatement message against its fact
    for m in msgs.values():
        fid = m.get("fact")
        if fid is None or m["kind"] not in ("fact", "restatement"):
            continue
        f = facts.get(fid)
        if f is None:
            err(f"message {m['id']}: fact {fid} does not exist")
            continue
        if m["kind"] == "fact":
            if f["message"] != m["id"]:
                err(f"message {m['id']}: a fact message for {fid}, but {fid} names {f['message']} as the one that states it")
            continue
        first = msgs.get(f["message"])
        if first is None:
            continue
        if m["conversation_id"] != first["conversation_id"]:
            err(f"message {m['id']}: restates {fid} from another chat")
        if m["sender_id"] == first["sender_id"]:
            err(f"message {m['id']}: restatement of {fid} by the same sender {m['sender_id']} who stated it")
        if m["is_bot"]:
            err(f"message {m['id']}: the bot cannot restate a fact")
        if m["id"] in times and first["id"] in times and times[m["id"]] <= times[first["id"]]:
            err(f"message {m['id']}: restates {fid} before it was stated ({first['id']})")

    # members
    groups_of = defaultdict(set)
    for cid, who in senders.items():
        members = {s for s in who if s != "bot"}
        if cid not in chats:
            continue
        if chats[cid]["kind"] == "group":
            lo, hi = MEMBERS_PER_GROUP
            if not lo <= len(members) <= hi:
                err(f"chat {cid}: {len(members)} members, want {lo}-{hi}")
            for s in members:
                groups_of[s].add(cid)
        elif len(members) != 1:
            err(f"chat {cid}: a private chat should have exactly one member, has {len(members)}")
    if not any(len(g) >= 2 for g in groups_of.values()):
        err("members: nobody is in two group chats with the same sender_id")

    # small talk
    for i, s in enumerate(data["small_talk"]):
        where = f"small_talk[{i}]"
        if not isinstance(s, dict) or not check_fields(s, {"conversation_id": str, "text": str}, where):
            continue
        if s["conversation_id"] not in chats:
            err(f"{where}: unknown conversation_id {s['conversation_id']}")

    # minimums
    en_chats = {cid for cid, c in chats.items() if c["lang"] == "en"}
    private = {cid for cid, c in chats.items() if c["kind"] == "private"}
    english = [m for m in msgs.values() if m["conversation_id"] in en_chats
               and m["kind"] != "sticker" and not CJK.search(m["text"])]
    have = {
        "chats": len(chats),
        "group chats": sum(c["kind"] == "group" for c in chats.values()),
        "private chats": len(private),
        "messages": len(msgs),
        "English messages": len(english),
        "facts": len(facts),
        "English facts": sum(f["lang"] == "en" for f in facts.values()),
        "private facts": sum(f["conversation_id"] in private for f in facts.values()),
        "sensitive private facts": sum(f["conversation_id"] in private and f.get("sensitive") is True
                                       for f in facts.values()),
        "restated facts": sum(f.get("restated_by") is not None for f in facts.values()),
        "invented bot lines": sum(m.get("invented") is True for m in msgs.values()),
        "small_talk lines": len(data["small_talk"]),
    }
    for name, want in MIN.items():
        if have[name] < want:
            err(f"count: {name} is {have[name]}, want at least {want}")
    return report((chats, msgs, facts, have, data))


def report(state):
    if state is not None:
        chats, msgs, facts, have, data = state
        cids = list(chats)
        by = Counter((m["conversation_id"], m["kind"]) for m in msgs.values())
        cols = [chats[c]["name"] for c in cids]
        w = max(8, *(width(c) for c in cols)) + 2
        print("kind".ljust(12) + "".join(pad(c, w) for c in cols) + "total".rjust(8))
        for k in KINDS:
            row = [by[(c, k)] for c in cids]
            print(k.ljust(12) + "".join(str(n).rjust(w) for n in row) + str(sum(row)).rjust(8))
        tot = [sum(by[(c, k)] for k in KINDS) for c in cids]
        print("all".ljust(12) + "".join(str(n).rjust(w) for n in tot) + str(sum(tot)).rjust(8))
        fc = Counter(f["conversation_id"] for f in facts.values())
        rc = Counter(f["conversation_id"] for f in facts.values() if f.get("restated_by"))
        print("facts".ljust(12) + "".join(str(fc[c]).rjust(w) for c in cids) + str(len(facts)).rjust(8))
        print("restated".ljust(12) + "".join(str(rc[c]).rjust(w) for c in cids) + str(sum(rc.values())).rjust(8))
        print()
        for name, want in MIN.items():
            print(f"{name:<24}{have[name]:>5}  (min {want})")
        if msgs:
            print(f"{'fact share':<24}{have['facts'] / have['messages']:>5.1%}")
    if errors:
        print(f"\nFAIL: {len(errors)} problem(s):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    print("\nOK")
    return 0


def width(s):
    # display columns, counting CJK and full-width characters as two
    return sum(2 if CJK.match(ch) or ord(ch) > 0xff00 else 1 for ch in s)


def pad(s, w):
    return " " * max(1, w - width(s)) + s


if __name__ == "__main__":
    sys.exit(main())
