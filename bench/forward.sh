#!/usr/bin/env bash
# Auto-forwarding benchmark: one ironbus (RocksDB with sync durability, or the memory store) with
# three queues of PARTITIONS partitions: bench-direct, and bench-fwd-src whose ForwardTo is
# bench-fwd-dst. Alternating rounds with the same load generator (ironbus-bench) and the same
# flags: "direct" runs send to bench-direct and receive from it; "forward" runs send to
# bench-fwd-src and receive from bench-fwd-dst, so every message takes one hop (the source's
# transfer queue, the forwarder, the destination) before a consumer sees it. PRODUCERS producers
# send durable messages of SIZE bytes while CONSUMERS consumers receive in MODE; a run ends when
# MESSAGES have been received. Prints one line per run and, at the end, medians per kind (receive
# rate, send rate, end-to-end p50/p99, broker CPU per message) and the forward / direct ratio.
#
#   bench/forward.sh                                  # 5 rounds, 4 P / 4 C, 1 KiB, peek-lock
#   ROUNDS=3 MESSAGES=20000 STORE=memory bench/forward.sh
#
# Env: ROUNDS (5), MESSAGES (100000), PRODUCERS (4), CONSUMERS (4), PARTITIONS (16; 0: not
# partitioned), SIZE (1024), MODE (peek-lock), ACCEPT_BATCH (1), CREDIT (100), WINDOW (100),
# STORE (rocksdb), OUT (forward.jsonl), TIMEOUT per run (300), PAUSE (2), CLIENT (wire),
# SERVER and BENCH (binaries to use instead of building release ones).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-5}"
MESSAGES="${MESSAGES:-100000}"
PRODUCERS="${PRODUCERS:-4}"
CONSUMERS="${CONSUMERS:-4}"
PARTITIONS="${PARTITIONS:-16}"
SIZE="${SIZE:-1024}"
MODE="${MODE:-peek-lock}"
ACCEPT_BATCH="${ACCEPT_BATCH:-1}"
CREDIT="${CREDIT:-100}"
WINDOW="${WINDOW:-100}"
STORE="${STORE:-rocksdb}"
OUT="${OUT:-forward.jsonl}"
TIMEOUT="${TIMEOUT:-300}"
PAUSE="${PAUSE:-2}"
CLIENT="${CLIENT:-wire}"
WORK="$(mktemp -d)"
PORT="${PORT:-5693}"; HTTP="${HTTP_PORT:-5393}"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
release_binaries

python3 - "$PARTITIONS" > "$WORK/config.json" <<'PY'
import json, sys
partitions = int(sys.argv[1])
props = {"EnablePartitioning": True, "PartitionCount": partitions} if partitions else {}
queues = [{"Name": "bench-direct", "Properties": dict(props)},
          {"Name": "bench-fwd-dst", "Properties": dict(props)},
          {"Name": "bench-fwd-src", "Properties": dict(props, ForwardTo="bench-fwd-dst")}]
print(json.dumps({"UserConfig": {"Namespaces": [
    {"Name": "sbemulatorns", "Queues": queues, "Topics": []}]}}))
PY

trap cleanup_server EXIT

start_server "$PORT" "127.0.0.1:$HTTP" "$STORE" "$WORK/data" "$WORK/ironbus.log"
await_server "$PORT" 150 "$WORK/ironbus.log" || true

# bench_run KIND: one run ("direct" or "forward"); its JSON (plus CPU) is appended to $OUT.
bench_run() {
  local kind="$1" address from load before after
  case $kind in
    direct)  address=bench-direct; from=bench-direct;;
    forward) address=bench-fwd-src; from=bench-fwd-dst;;
  esac
  load="$(cut -d' ' -f1 /proc/loadavg)"
  before="$(cpu_ticks "$SERVER_PID")"
  /usr/bin/time -f "%U %S" -o "$WORK/client.time" "$BENCH" --url "amqp://127.0.0.1:$PORT" \
    --sasl-plain "$SAS_USER:$SAS_KEY" --address "$address" --receive-from "$from" \
    --producers "$PRODUCERS" --consumers "$CONSUMERS" --mode "$MODE" \
    --accept-batch "$ACCEPT_BATCH" --messages "$MESSAGES" --size "$SIZE" --durable \
    --window "$WINDOW" --credit "$CREDIT" --timeout "$TIMEOUT" --client "$CLIENT" \
    > "$WORK/run.json" 2> "$WORK/run.err" || tail -2 "$WORK/run.err" >&2
  after="$(cpu_ticks "$SERVER_PID")"
  record_run "$ROUND" "$kind" "$load" "$before" "$after"
  sleep "$PAUSE"
}

: > "$OUT"
for ROUND in $(seq "$ROUNDS"); do
  # Alternate which kind goes first, so that neither always runs on a warmer server.
  if [ $((ROUND % 2)) = 1 ]; then bench_run direct; bench_run forward
  else bench_run forward; bench_run direct; fi
done

summarize_pair direct forward "store $STORE"
