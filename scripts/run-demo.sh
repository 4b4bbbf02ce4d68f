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
# Each run starts from an empty demo table so the output is the same every time.
rm -rf ./data/lancedb-demo
"$bin" serve --config "$cfg" > ./data/demo-serve.log 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:${port}/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "scopemem failed to start; log:" >&2; cat ./data/demo-serve.log >&2; exit 1
  fi
  sleep 0.5
done
echo "scopemem is serving on http://127.0.0.1:${port} (config: $cfg, log: ./data/demo-serve.log)"
"$bin" demo --url "http://127.0.0.1:${port}"
if [ "${SERVE:-0}" = "1" ]; then
  echo "SERVE=1: still serving; Ctrl-C to stop"
  wait "$pid"
else
  echo "  the service stops now; SERVE=1 make run keeps it serving"
fi
