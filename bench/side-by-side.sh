#!/usr/bin/env bash
# Side-by-side AMQP benchmark: RabbitMQ (durable queues, persistent messages), ironbus on the
# memory store and ironbus on RocksDB (sync durability), in alternating rounds, with the same
# load generator (ironbus-bench) and the same flags. Prints one line per run and, at the end,
# medians and ratios per configuration. Every run's JSON (plus the CPU each broker and the
# client used per message) goes to $OUT.
#
#   bench/side-by-side.sh                 # 5 rounds
#   ROUNDS=3 MESSAGES=50000 bench/side-by-side.sh
#
# Needs RabbitMQ with the AMQP 1.0 plugin from ../shared/peers (start-rabbitmq.sh; queues
# `bench` and `bench-4x4`). Env: ROUNDS (5), MESSAGES (100000), OUT (side-by-side.jsonl),
# PEERS (../shared/peers), TIMEOUT per run in seconds (60), PAUSE between runs (2),
# CONFIGS ("P C MODE ACCEPT-BATCH" list, comma-separated), BROKERS ("rabbitmq memory rocksdb"),
# CLIENT (the load generator's AMQP client for every broker: wire, its own lean one, or fe2o3),
# CREDIT (each consumer's link credit, 100).
#
# REVS compares ironbus revisions with each other instead of brokers (a regression check):
#
#   REVS="74b7ddb 174648f" CONFIGS="4 4 peek-lock 1,4 4 peek-lock 50" ROUNDS=10 bench/side-by-side.sh
#
# builds each revision's server (release, from `git archive`, in $TARGET/revs; built once and
# kept), starts it on every store of BROKERS (default "memory rocksdb"; rabbitmq is dropped) and
# runs the working tree's load generator against each server in turn, round after round. The
# servers are named `<store>@<rev>`; ratios are against the first revision on the same store.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS:-$ROOT/../shared/peers}"
ROUNDS="${ROUNDS:-5}"
MESSAGES="${MESSAGES:-100000}"
OUT="${OUT:-side-by-side.jsonl}"
TIMEOUT="${TIMEOUT:-60}"
PAUSE="${PAUSE:-2}"
CLIENT="${CLIENT:-wire}"
CREDIT="${CREDIT:-100}"
REVS="${REVS:-}"
WORK="$(mktemp -d)"
RMQ_PORT="${RABBITMQ_BENCH_PORT:-5673}"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# With REVS the servers are the revisions' own builds: only the load generator comes from here.
if [ -n "$REVS" ]; then
  cargo build --release -p ironbus-bench
else
  cargo build --release -p ironbus -p ironbus-bench
fi
TARGET="$(target_dir)"
BENCH="$TARGET/release/ironbus-bench"

cat > "$WORK/config.json" <<'EOF'
{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
  {"Name": "bench", "Properties": {"EnablePartitioning": true, "PartitionCount": 16}},
  {"Name": "bench-4x4", "Properties": {"EnablePartitioning": true, "PartitionCount": 16}}],
  "Topics": []}]}}
EOF

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # A stopping server still writes to its data directory: wait before removing it.
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

declare -A PORT_OF PID_OF
NEXT_PORT=5694
start_ironbus() { # name server store
  local port=$NEXT_PORT flags
  NEXT_PORT=$((NEXT_PORT + 2))
  mapfile -t flags < <(listeners_off "$2")
  "$2" --amqp-addr "127.0.0.1:$port" "${flags[@]}" \
    --config "$WORK/config.json" --store "$3" --data-dir "$WORK/data-$port" \
    > "$WORK/ironbus-$port.log" 2>&1 &
  PIDS+=($!)
  PORT_OF[$1]=$port
  PID_OF[$1]=$!
  wait_for_port "$port" 0.2 && return 0
  echo "ironbus $1 on port $port did not start: $(tail -5 "$WORK/ironbus-$port.log")" >&2
  exit 1
}

read -r -a BROKERS <<< "${BROKERS:-rabbitmq memory rocksdb}"
if [ -n "$REVS" ]; then
  STORES=()
  for broker in "${BROKERS[@]}"; do [ "$broker" = rabbitmq ] || STORES+=("$broker"); done
  [ ${#STORES[@]} -gt 0 ] || STORES=(memory rocksdb)
  BROKERS=()
  for rev in $REVS; do
    server="$(server_of_rev "$rev")"
    for store in "${STORES[@]}"; do
      start_ironbus "$store@$rev" "$server" "$store"
      BROKERS+=("$store@$rev")
    done
  done
else
  for broker in "${BROKERS[@]}"; do
    [ "$broker" = rabbitmq ] || start_ironbus "$broker" "$TARGET/release/ironbus" "$broker"
  done
  if [[ " ${BROKERS[*]} " == *" rabbitmq "* ]]; then "$PEERS/start-rabbitmq.sh"; fi
fi

TICKS="$(getconf CLK_TCK)"

: > "$OUT"
# "producers consumers mode accept-batch", separated by commas.
IFS=, read -r -a CONFIGS <<< "${CONFIGS:-1 1 peek-lock 1,4 4 peek-lock 1,1 1 peek-lock 50,4 4 peek-lock 50,4 4 receive-and-delete 1}"
for round in $(seq "$ROUNDS"); do
  for config in "${CONFIGS[@]}"; do
    read -r P C MODE BATCH <<< "$config"
    for broker in "${BROKERS[@]}"; do
      QUEUE=bench; [ "$P" = 4 ] && QUEUE=bench-4x4
      case $broker in
        rabbitmq) URL="amqp://127.0.0.1:$RMQ_PORT"; ADDRESS="/amq/queue/$QUEUE"; AUTH=()
                  PID="$(cat "${PEERS_STATE:-${TMPDIR:-/tmp}/ironbus-peers}/rabbitmq/beam.pid")";;
        *)        URL="amqp://127.0.0.1:${PORT_OF[$broker]}"; ADDRESS=$QUEUE
                  AUTH=(--sasl-plain "$SAS_USER:$SAS_KEY"); PID="${PID_OF[$broker]}";;
      esac
      LOAD="$(cut -d' ' -f1 /proc/loadavg)"
      BEFORE="$(cpu_ticks "$PID")"
      /usr/bin/time -f "%U %S" -o "$WORK/client.time" "$BENCH" --url "$URL" "${AUTH[@]}" \
        --address "$ADDRESS" --producers "$P" --consumers "$C" --mode "$MODE" \
        --accept-batch "$BATCH" --messages "$MESSAGES" --size 1024 --durable --window 100 \
        --credit "$CREDIT" --timeout "$TIMEOUT" --client "$CLIENT" > "$WORK/run.json" 2> "$WORK/run.err" || true
      AFTER="$(cpu_ticks "$PID")"
      python3 - "$round" "$broker" "$P" "$C" "$MODE" "$BATCH" "$LOAD" "$BEFORE" "$AFTER" \
          "$TICKS" "$WORK/client.time" "$WORK/run.json" >> "$OUT" <<'PY'
import json, sys
rnd, broker, p, c, mode, batch, load, before, after, ticks, client_time, run = sys.argv[1:]
lines = open(run).read().split()
report = json.loads(lines[-1]) if lines else {"error": "no report"}
user, system = (float(x) for x in open(client_time).read().split()[-2:])
received = max(report.get("received", 0), 1)
report.update(round=int(rnd), broker=broker, config=f"{p}x{c} {mode} accept-batch {batch}",
              load=float(load),
              broker_cpu_us_per_msg=(int(after) - int(before)) / int(ticks) * 1e6 / received,
              client_cpu_us_per_msg=(user + system) * 1e6 / received)
print(json.dumps(report))
PY
      tail -1 "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("round %d %-16s %-38s %8.0f msg/s  p50 %6.1f ms  p99 %7.1f ms  broker %5.1f us/msg  client %5.1f us/msg  load %s" % (
    r["round"], r["broker"], r["config"], r.get("msgs_per_sec", 0), r.get("p50_ms", 0),
    r.get("p99_ms", 0), r["broker_cpu_us_per_msg"], r["client_cpu_us_per_msg"], r["load"]))'
      sleep "$PAUSE"
    done
  done
done
if [[ " ${BROKERS[*]} " == *" rabbitmq "* ]]; then "$PEERS/stop-rabbitmq.sh" || true; fi

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
complete = [r for r in rows if r.get("received") == r.get("messages")]
revisions = any("@" in r["broker"] for r in rows)
print("\nmedians over complete runs (range); ratio =",
      "each revision / the first, same store" if revisions else "ironbus / RabbitMQ",
      "; client", rows[0].get("client", "?") if rows else "?")
for config in dict.fromkeys(r["config"] for r in rows):
    medians, cpu = {}, {}
    for broker in dict.fromkeys(r["broker"] for r in rows):
        runs = [r for r in complete if r["config"] == config and r["broker"] == broker]
        if not runs:
            continue
        rate = [r["msgs_per_sec"] for r in runs]
        med = lambda key: statistics.median(r[key] for r in runs)
        medians[broker] = statistics.median(rate)
        cpu[broker] = med("broker_cpu_us_per_msg")
        print(f"{config:38} {broker:16} n={len(runs)} {medians[broker]:8.0f} "
              f"({min(rate):.0f}-{max(rate):.0f}) msg/s  p50 {med('p50_ms'):6.1f}  "
              f"p99 {med('p99_ms'):7.1f} ms  broker {cpu[broker]:5.1f}  "
              f"client {med('client_cpu_us_per_msg'):5.1f} us/msg")
    if revisions:
        first = {}
        for broker in medians:
            base = first.setdefault(broker.split("@")[0], broker)
            if base != broker:
                print(f"{'':38} {broker} / {base}: {medians[broker] / medians[base]:.3f}x msg/s, "
                      f"{cpu[broker] / cpu[base]:.3f}x broker CPU per message")
    elif "rabbitmq" in medians:
        ratios = "  ".join(f"{b} {medians[b] / medians['rabbitmq']:.2f}x"
                           for b in ("memory", "rocksdb") if b in medians)
        print(f"{'':38} ratio: {ratios}")
PY
