#!/usr/bin/env bash
# `make run`: start scopemem on a local LanceDB under ./data with a demo scope map, run the
# demo against it over HTTP, then stop the service (SERVE=1 keeps it serving afterwards).
set -euo pipefail
bin="$1"; port="${2:-8787}"
mkdir -p ./data
cfg=./data/demo-config.json
if [ ! -f "$cfg" ]; then
  cat > "$cfg" <<JSON
{
  "conversation_scope_map": {
    "default:GroupMessage:12345": "家人",
    "default:GroupMessage:67890": "工作"
  },
  "unmapped_scope": "public",
  "storage": {"db_dir": "./data/lancedb-demo"},
  "server": {"http_addr": "127.0.0.1:${port}"}
}
JSON
fi
# The address the config names (an edited or older demo config may name another port than
# PORT): the demo talks to what the service serves.
# Without one, the service's default from conf_schema.json.
schema="$(dirname "$0")/../conf_schema.json"
addr="$(python3 - "$cfg" "$schema" <<'PY' 2>/dev/null || true
import json, sys
config, schema = (json.load(open(p)) for p in sys.argv[1:3])
print((config.get("server") or {}).get("http_addr") or schema["server"]["items"]["http_addr"]["default"])
PY
)"
if [ -z "$addr" ]; then
  echo "$cfg is not a JSON config scopemem can read; fix it or delete it to get a fresh demo config" >&2
  exit 1
fi
if [ "$addr" != "127.0.0.1:${port}" ]; then
  echo "note: $cfg serves on $addr (PORT=${port} applies to a new demo config only)"
fi
# Each run starts from an empty demo table so the output is the same every time.
rm -rf ./data/lancedb-demo
"$bin" serve --config "$cfg" > ./data/demo-serve.log 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
up=0
for _ in $(seq 1 240); do
  if curl -fsS "http://${addr}/healthz" >/dev/null 2>&1; then up=1; break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "scopemem failed to start; log:" >&2; cat ./data/demo-serve.log >&2; exit 1
  fi
  sleep 0.5
done
if [ "$up" != 1 ]; then
  echo "scopemem did not answer on http://${addr}/healthz within 2 minutes; log:" >&2
  tail -n 20 ./data/demo-serve.log >&2
  exit 1
fi
echo "scopemem is serving on http://${addr} (config: $cfg, log: ./data/demo-serve.log)"
"$bin" demo --url "http://${addr}"
if [ "${SERVE:-0}" = "1" ]; then
  echo "SERVE=1: still serving; Ctrl-C to stop"
  wait "$pid"
else
  echo "  the service stops now; SERVE=1 make run keeps it serving"
fi
