#!/usr/bin/env bash
# Does the web console cost the message path anything? Two ironbus servers on RocksDB (sync
# durability), started side by side on the same entities: "off" with `--console off`, "watched"
# with the console on and a dashboard open on it for the whole run (a client signed in that loads
# the dashboard's data, `/$console/api/entities`, every INTERVAL seconds: five times as often as
# the page refreshes itself). Alternating rounds with the same load generator (ironbus-bench) and
# the same flags on a PARTITIONS-partition queue among ENTITIES-1 other queues; the idle server
# takes no CPU while the other runs. Prints one line per run and, at the end, medians per kind
# (receive rate, send rate, end-to-end p50/p99, broker CPU per message, including the dashboard's
# requests) and the watched / off ratio.
#
#   bench/console-overhead.sh                          # 5 rounds, 4 P / 4 C, 1 KiB, peek-lock
#   ROUNDS=3 MESSAGES=20000 bench/console-overhead.sh
#
# Env: ROUNDS (5), MESSAGES (100000), PRODUCERS (4), CONSUMERS (4), PARTITIONS (16), ENTITIES
# (100), INTERVAL (1), SIZE (1024), MODE (peek-lock), ACCEPT_BATCH (1), CREDIT (100), WINDOW
# (100), OUT (console-overhead.jsonl), TIMEOUT per run (300), PAUSE (2), CLIENT (wire), SERVER
# and BENCH (binaries to use instead of building release ones).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-5}"
MESSAGES="${MESSAGES:-100000}"
PRODUCERS="${PRODUCERS:-4}"
CONSUMERS="${CONSUMERS:-4}"
PARTITIONS="${PARTITIONS:-16}"
ENTITIES="${ENTITIES:-100}"
INTERVAL="${INTERVAL:-1}"
SIZE="${SIZE:-1024}"
MODE="${MODE:-peek-lock}"
ACCEPT_BATCH="${ACCEPT_BATCH:-1}"
CREDIT="${CREDIT:-100}"
WINDOW="${WINDOW:-100}"
OUT="${OUT:-console-overhead.jsonl}"
TIMEOUT="${TIMEOUT:-300}"
PAUSE="${PAUSE:-2}"
CLIENT="${CLIENT:-wire}"
WORK="$(mktemp -d)"
PORT_OFF="${PORT_OFF:-5694}"; PORT_ON="${PORT_ON:-5695}"; HTTP_ON="${HTTP_PORT:-5394}"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
release_binaries

python3 - "$PARTITIONS" "$ENTITIES" > "$WORK/config.json" <<'PY'
import json, sys
partitions, entities = int(sys.argv[1]), int(sys.argv[2])
queues = [{"Name": "bench", "Properties": {"EnablePartitioning": True, "PartitionCount": partitions}}]
queues += [{"Name": f"idle-{i:04}", "Properties": {}} for i in range(1, entities)]
print(json.dumps({"UserConfig": {"Namespaces": [
    {"Name": "sbemulatorns", "Queues": queues, "Topics": []}]}}))
PY

OFF_PID="" ON_PID="" WATCHER_PID=""
cleanup() {
  for pid in $WATCHER_PID $OFF_PID $ON_PID; do kill "$pid" 2>/dev/null || true; done
  for pid in $WATCHER_PID $OFF_PID $ON_PID; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

common=(--https-addr off --amqps-addr off --config "$WORK/config.json" --store rocksdb
        --max-entities "$((ENTITIES + 10))")
"$SERVER" --amqp-addr "127.0.0.1:$PORT_OFF" --http-addr off --console off "${common[@]}" \
  --data-dir "$WORK/off" > "$WORK/off.log" 2>&1 &
OFF_PID=$!
"$SERVER" --amqp-addr "127.0.0.1:$PORT_ON" --http-addr "127.0.0.1:$HTTP_ON" --console on \
  "${common[@]}" --data-dir "$WORK/on" > "$WORK/on.log" 2>&1 &
ON_PID=$!
for pair in "$PORT_OFF $OFF_PID off" "$PORT_ON $ON_PID on"; do
  read -r port pid name <<< "$pair"
  if ! wait_for_port "$port" 0.2 150 "$pid"; then
    echo "ironbus ($name) did not start: $(tail -5 "$WORK/$name.log")" >&2
    exit 1
  fi
done

# The open dashboard: signs in with the root policy, then loads the entity list every INTERVAL
# seconds until killed, counting its loads in $WORK/loads (one line each: entities, ms).
cat > "$WORK/watch.py" <<'PY'
import http.client, json, sys, time
port, user, key, interval, log = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
conn.request("POST", "/$console/api/session", json.dumps({"policy": user, "key": key}),
             {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"})
answer = conn.getresponse()
answer.read()
if answer.status != 200:
    sys.exit(f"console sign-in answered {answer.status}")
cookie = answer.getheader("Set-Cookie").split(";")[0]
with open(log, "a") as out:
    while True:
        started = time.monotonic()
        conn.request("GET", "/$console/api/entities", headers={"Cookie": cookie})
        answer = conn.getresponse()
        body = json.loads(answer.read())
        if answer.status != 200:
            sys.exit(f"the dashboard's data answered {answer.status}: {body}")
        took = time.monotonic() - started
        print(len(body["entities"]), round(took * 1000, 1), file=out, flush=True)
        time.sleep(max(0.0, interval - took))
PY

# bench_run KIND: one run ("off" or "watched"); its JSON (plus CPU) is appended to $OUT.
bench_run() {
  local kind="$1" port pid load before after extra
  case $kind in
    off)     port=$PORT_OFF; pid=$OFF_PID;;
    watched) port=$PORT_ON;  pid=$ON_PID
             : > "$WORK/loads"
             python3 "$WORK/watch.py" "$HTTP_ON" "$SAS_USER" "$SAS_KEY" "$INTERVAL" "$WORK/loads" &
             WATCHER_PID=$!;;
  esac
  load="$(cut -d' ' -f1 /proc/loadavg)"
  before="$(cpu_ticks "$pid")"
  /usr/bin/time -f "%U %S" -o "$WORK/client.time" "$BENCH" --url "amqp://127.0.0.1:$port" \
    --sasl-plain "$SAS_USER:$SAS_KEY" --address bench \
    --producers "$PRODUCERS" --consumers "$CONSUMERS" --mode "$MODE" \
    --accept-batch "$ACCEPT_BATCH" --messages "$MESSAGES" --size "$SIZE" --durable \
    --window "$WINDOW" --credit "$CREDIT" --timeout "$TIMEOUT" --client "$CLIENT" \
    > "$WORK/run.json" 2> "$WORK/run.err" || tail -2 "$WORK/run.err" >&2
  after="$(cpu_ticks "$pid")"
  if [ "$kind" = watched ]; then
    if ! kill -0 "$WATCHER_PID" 2>/dev/null; then
      wait "$WATCHER_PID" || true
      echo "the dashboard client stopped during the run" >&2
      exit 1
    fi
    kill "$WATCHER_PID"; wait "$WATCHER_PID" 2>/dev/null || true; WATCHER_PID=""
  fi
  # The dashboard's loads: how many, their median time, and that each listed every entity.
  extra="$(python3 - "$kind" "$ENTITIES" "$WORK/loads" <<'PY'
import json, statistics, sys
kind, entities, log = sys.argv[1:]
if kind != "watched":
    print(json.dumps({"dashboard_loads": 0}))
    sys.exit()
rows = [line.split() for line in open(log) if line.strip()]
extra = {"dashboard_loads": len(rows),
         "dashboard_load_ms": statistics.median(float(ms) for _, ms in rows) if rows else None}
if not rows or any(int(n) != int(entities) for n, _ in rows):
    extra.update(complete=False, error="no dashboard load, or one did not list every entity")
print(json.dumps(extra))
PY
)"
  record_run "$ROUND" "$kind" "$load" "$before" "$after" "$extra"
  sleep "$PAUSE"
}

: > "$OUT"
for ROUND in $(seq "$ROUNDS"); do
  # Alternate which kind goes first, so that neither always runs after the other.
  if [ $((ROUND % 2)) = 1 ]; then bench_run off; bench_run watched
  else bench_run watched; bench_run off; fi
done

summarize_pair off watched
