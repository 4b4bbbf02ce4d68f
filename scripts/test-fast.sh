#!/usr/bin/env bash
# `make test-fast`: the inner loop. The core crate's tests, the library's unit tests, then the
# integration tests that run in this process (real LanceDB directories, the real models from
# `make setup`'s assets) and need no spawned `serve`, browser, moto or host venv (AstrBot,
# NoneBot2, the MCP SDK).
# `make test` stays the full suite and CI's command; this is a subset of it, never a
# replacement.
set -euo pipefail
cd "$(dirname "$0")/.."

# The modules of tests/it.rs whose tests start no process. A module named here that it.rs no
# longer has is an error, so a rename cannot drop tests from this list unseen.
IN_PROCESS=(
  concurrency consolidation e5 feedback feedback_failures filter_paths http_api injection
  introspection life_cycle privacy provider_down resident scope_isolation semantic hybrid
  time_recall turns ui working_memory
)
filters=()
for m in "${IN_PROCESS[@]}"; do
  if ! grep -q "^mod $m;" tests/it.rs; then
    echo "[test-fast] tests/it.rs has no module $m: update scripts/test-fast.sh" >&2
    exit 1
  fi
  filters+=("$m::")
done

# The lance-free core crate first: config, scope, redaction, fact folding, time words. After
# an edit there it builds and runs in seconds, before the service crate relinks.
cargo test -p scopemem-core
# Both test binaries of the service crate in one build, so cargo compiles them side by side,
# without the `cli` feature: cargo would otherwise build and link the `scopemem` binary before
# tests/it.rs, and none of these tests runs it (Cargo.toml, `[[bin]]`).
lean=(-p scopemem --no-default-features)
cargo test "${lean[@]}" --lib --test it --no-run
# The library's slowest tests wait on LanceDB (a pruner's grace, index refreshes) more than
# they use a core: 4 at a time on 2 cores took 24 s, 2 at a time 31 s. The integration tests
# below embed with the real model and gain nothing past 2.
cargo test "${lean[@]}" --lib -- --test-threads=4
cargo test "${lean[@]}" --test it -- --test-threads=2 "${filters[@]}"
