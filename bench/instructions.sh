#!/usr/bin/env bash
# Instructions the broker executes per message, counted by valgrind (cachegrind without its
# cache simulation), for one or more ironbus revisions. Instruction counts do not depend on what
# else the machine is doing, so this compares revisions on a shared, noisy machine where
# throughput runs cannot (those are side-by-side.sh with REVS).
#
#   REVS="74b7ddb 174648f" bench/instructions.sh
#   REVS="74b7ddb HEAD" STORES=rocksdb CONFIGS="4 4 peek-lock 50" ROUNDS=5 bench/instructions.sh
#
# Each run starts the revision's server under valgrind on an empty data directory, drives it
# with the working tree's ironbus-bench (MESSAGES messages of 1 KiB, durable, window and credit
# 100, on a 16-partition queue), stops it with SIGTERM and reads the instruction total. Start-up
# and shutdown are taken out by running each configuration twice, with MESSAGES and with
# 2 x MESSAGES: per message = (I(2M) - I(M)) / M. The server is slowed some 50-fold under
# valgrind, so batches (of sends, settlements, store writes) differ from a native run: the
# figure compares revisions; it is not the native cost.
#
# Env: REVS (required), STORES ("memory rocksdb"), CONFIGS ("P C MODE ACCEPT-BATCH" list,
# comma-separated; "4 4 peek-lock 1,4 4 peek-lock 50"), MESSAGES (4000), ROUNDS (3), OUT
# (instructions.jsonl), TIMEOUT per run in seconds (600).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REVS="${REVS:?set REVS to the revisions to compare, e.g. REVS=\"74b7ddb HEAD\"}"
read -r -a STORES <<< "${STORES:-memory rocksdb}"
IFS=, read -r -a CONFIGS <<< "${CONFIGS:-4 4 peek-lock 1,4 4 peek-lock 50}"
MESSAGES="${MESSAGES:-4000}"
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:-instructions.jsonl}"
TIMEOUT="${TIMEOUT:-600}"
PORT=5698
WORK="$(mktemp -d)"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cargo build --release -p ironbus-bench
TARGET="$(target_dir)"
BENCH="$TARGET/release/ironbus-bench"

cat > "$WORK/config.json" <<'EOF'
{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
  {"Name": "bench", "Properties": {"EnablePartitioning": true, "PartitionCount": 16}}],
  "Topics": []}]}}
EOF

SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# One run: prints the server's instruction total, or nothing when the run did not complete.
count_run() { # server store P C MODE BATCH messages
  local server=$1 store=$2 flags total
  rm -rf "$WORK/data" "$WORK/cg.out"
  mapfile -t flags < <(listeners_off "$server")
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$WORK/cg.out" \
    "$server" --amqp-addr "127.0.0.1:$PORT" "${flags[@]}" --config "$WORK/config.json" \
    --store "$store" --data-dir "$WORK/data" > "$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  if ! wait_for_port "$PORT" 1; then
    echo "the server did not start: $(tail -5 "$WORK/server.log")" >&2
    exit 1
  fi
  "$BENCH" --url "amqp://127.0.0.1:$PORT" --sasl-plain "$SAS_USER:$SAS_KEY" \
    --address bench --producers "$3" --consumers "$4" --mode "$5" --accept-batch "$6" \
    --messages "$7" --size 1024 --durable --window 100 --credit 100 --timeout "$TIMEOUT" \
    > "$WORK/run.json" 2> "$WORK/run.err" || true
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
  SERVER_PID=""
  if python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().split()[-1]); sys.exit(r.get("received") != r.get("messages"))' "$WORK/run.json" 2>/dev/null; then
    total="$(awk '/^summary:/ {print $2}' "$WORK/cg.out")"
    echo "$total"
  fi
}

: > "$OUT"
for round in $(seq "$ROUNDS"); do
  for config in "${CONFIGS[@]}"; do
    read -r P C MODE BATCH <<< "$config"
    for rev in $REVS; do
      server="$(server_of_rev "$rev")"
      for store in "${STORES[@]}"; do
        once="$(count_run "$server" "$store" "$P" "$C" "$MODE" "$BATCH" "$MESSAGES")"
        twice="$(count_run "$server" "$store" "$P" "$C" "$MODE" "$BATCH" $((2 * MESSAGES)))"
        python3 - "$round" "$rev" "$store" "$P" "$C" "$MODE" "$BATCH" "$MESSAGES" "$once" "$twice" >> "$OUT" <<'PY'
import json, sys
rnd, rev, store, p, c, mode, batch, messages, once, twice = sys.argv[1:]
row = {"round": int(rnd), "rev": rev, "store": store, "config": f"{p}x{c} {mode} accept-batch {batch}",
       "messages": int(messages)}
if once and twice:
    row.update(instructions_once=int(once), instructions_twice=int(twice),
               instructions_per_msg=(int(twice) - int(once)) / int(messages))
else:
    row["error"] = "a run did not receive every message"
print(json.dumps(row))
PY
        tail -1 "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)
per = r.get("instructions_per_msg")
print("round %d %-10s %-8s %-34s %s" % (r["round"], r["rev"], r["store"], r["config"],
      "%9.0f instructions/msg" % per if per is not None else r["error"]))'
      done
    done
  done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
done = [r for r in rows if "instructions_per_msg" in r]
print("\nmedian instructions per message (range); ratio = each revision / the first, same store")
for config in dict.fromkeys(r["config"] for r in rows):
    for store in dict.fromkeys(r["store"] for r in rows):
        first = None
        for rev in dict.fromkeys(r["rev"] for r in rows):
            runs = [r["instructions_per_msg"] for r in done
                    if (r["config"], r["store"], r["rev"]) == (config, store, rev)]
            if not runs:
                continue
            med = statistics.median(runs)
            first = first or med
            print(f"{config:34} {store:8} {rev:10} n={len(runs)} {med:9.0f} "
                  f"({min(runs):.0f}-{max(runs):.0f})  {med / first:.3f}x")
PY
