#!/usr/bin/env bash
# Topic fan-out benchmark: ironbus (a topic with N subscriptions; RocksDB with sync durability,
# optionally the memory store) against RabbitMQ (a durable fanout exchange bound to N durable
# classic queues), for N = 1, 4 and 16, in alternating rounds with the same load generator
# (ironbus-bench --receive-from) and the same flags. Producers send 1 KiB durable messages to the
# topic / exchange; consumers (CONSUMERS_PER_SUB per subscription / queue) receive every copy;
# a run ends when messages x N have been received. Prints one line per run and, at the end,
# medians (summed receive rate over the subscriptions, send rate, p50/p99) and the
# ironbus / RabbitMQ ratio per N. Then, for ironbus on RocksDB, the bytes written to the store per
# publish (ironbus_store_written_bytes_total from /metrics, before and after a run, divided by
# the messages published) for peek-lock, receive-and-delete and send-only runs.
#
#   bench/fanout.sh                                  # 3 rounds, N = 1 4 16
#   ROUNDS=5 RECEIPTS=80000 BROKERS="rabbitmq rocksdb memory" bench/fanout.sh
#
# Env: ROUNDS (3), RECEIPTS (40000: copies received per run; a run publishes RECEIPTS / N
# messages, at least MIN_MESSAGES = 2000), FANOUTS ("1 4 16"), BROKERS ("rabbitmq rocksdb"),
# PRODUCERS (2), CONSUMERS_PER_SUB (1), MODE (peek-lock), ACCEPT_BATCH (1), CREDIT (100),
# WINDOW (100), SIZE (1024), PARTITIONS (ironbus topics' PartitionCount; 0, the default: not
# partitioned), BYTES_FANOUTS ("1 16"; empty skips the bytes
# runs), BYTES_MESSAGES (5000), OUT (fanout.jsonl), TIMEOUT per run (120), PAUSE (2),
# PEERS (../shared/peers), CLIENT (wire), SERVER and BENCH (binaries to use instead of building
# release ones).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS:-$ROOT/../shared/peers}"
ROUNDS="${ROUNDS:-3}"
RECEIPTS="${RECEIPTS:-40000}"
MIN_MESSAGES="${MIN_MESSAGES:-2000}"
FANOUTS="${FANOUTS:-1 4 16}"
read -r -a BROKERS <<< "${BROKERS:-rabbitmq rocksdb}"
PRODUCERS="${PRODUCERS:-2}"
CONSUMERS_PER_SUB="${CONSUMERS_PER_SUB:-1}"
MODE="${MODE:-peek-lock}"
ACCEPT_BATCH="${ACCEPT_BATCH:-1}"
CREDIT="${CREDIT:-100}"
WINDOW="${WINDOW:-100}"
SIZE="${SIZE:-1024}"
PARTITIONS="${PARTITIONS:-0}"
BYTES_FANOUTS="${BYTES_FANOUTS-1 16}"
BYTES_MESSAGES="${BYTES_MESSAGES:-5000}"
OUT="${OUT:-fanout.jsonl}"
TIMEOUT="${TIMEOUT:-120}"
PAUSE="${PAUSE:-2}"
CLIENT="${CLIENT:-wire}"
WORK="$(mktemp -d)"
ROCKS_PORT=5687; ROCKS_HTTP=5387
MEM_PORT=5689; MEM_HTTP=5389
RMQ_PORT="${RABBITMQ_BENCH_PORT:-5673}"
ALL_FANOUTS="$(echo "$FANOUTS $BYTES_FANOUTS" | tr ' ' '\n' | sed '/^$/d' | sort -nu | tr '\n' ' ')"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
release_binaries

# ironbus entities: topic bench-fo{N} with subscriptions s1..sN (no rules: the $Default rule,
# TrueFilter, passes everything).
python3 - "$PARTITIONS" $ALL_FANOUTS > "$WORK/config.json" <<'PY'
import json, sys
partitions, fanouts = int(sys.argv[1]), [int(n) for n in sys.argv[2:]]
props = {"EnablePartitioning": True, "PartitionCount": partitions} if partitions else {}
topics = [{"Name": f"bench-fo{n}", "Properties": props,
           "Subscriptions": [{"Name": f"s{i}", "Rules": []} for i in range(1, n + 1)]}
          for n in fanouts]
print(json.dumps({"UserConfig": {"Namespaces": [
    {"Name": "sbemulatorns", "Queues": [], "Topics": topics}]}}))
PY
# RabbitMQ entities: durable fanout exchange bench-fo{N} bound to durable classic queues
# bench-fo{N}-s1..sN, imported with rabbitmqctl (the management plugin is not enabled).
python3 - $ALL_FANOUTS > "$WORK/rabbitmq-definitions.json" <<'PY'
import json, sys
fanouts = [int(n) for n in sys.argv[1:]]
exchanges, queues, bindings = [], [], []
for n in fanouts:
    exchanges.append({"name": f"bench-fo{n}", "vhost": "/", "type": "fanout", "durable": True,
                      "auto_delete": False, "internal": False, "arguments": {}})
    for i in range(1, n + 1):
        queues.append({"name": f"bench-fo{n}-s{i}", "vhost": "/", "durable": True,
                       "auto_delete": False, "arguments": {"x-queue-type": "classic"}})
        bindings.append({"source": f"bench-fo{n}", "vhost": "/", "destination": f"bench-fo{n}-s{i}",
                         "destination_type": "queue", "routing_key": "", "arguments": {}})
print(json.dumps({"exchanges": exchanges, "queues": queues, "bindings": bindings}))
PY

PIDS=()
RMQ_STARTED=0
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # A stopping server still writes to its data directory: wait before removing it.
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ "$RMQ_STARTED" = 1 ] && { "$PEERS/stop-rabbitmq.sh" || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

# sas_token URI: a SAS token for the well-known development key (HTTP management fallback).
sas_token() {
  python3 - "$1" "$SAS_USER" "$SAS_KEY" <<'PY'
import base64, hashlib, hmac, sys, time, urllib.parse
uri, user, key = sys.argv[1:]
resource = urllib.parse.quote(uri, safe="").lower()
expiry = str(int(time.time()) + 3600)
sig = base64.b64encode(hmac.new(key.encode(), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest())
print(f"SharedAccessSignature sr={resource}&sig={urllib.parse.quote(sig, safe='')}&se={expiry}&skn={user}")
PY
}

# ensure_entities HTTP_PORT: the topics and subscriptions the config declared, or, if the config
# did not declare them, created over the ATOM management API.
ensure_entities() {
  local http="$1" n i code token body
  for n in $ALL_FANOUTS; do
    for i in $(seq "$n"); do
      token="$(sas_token "http://127.0.0.1:$http/bench-fo$n/Subscriptions/s$i")"
      code="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: $token" \
        "http://127.0.0.1:$http/bench-fo$n/Subscriptions/s$i")"
      [ "$code" = 200 ] && continue
      echo "bench-fo$n/Subscriptions/s$i: GET $code; creating it over HTTP" >&2
      if [ "$i" = 1 ]; then
        token="$(sas_token "http://127.0.0.1:$http/bench-fo$n")"
        body='<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
        [ "$PARTITIONS" != 0 ] && body+='<EnablePartitioning>true</EnablePartitioning>'
        body+='</TopicDescription></content></entry>'
        curl -s -o /dev/null -w "PUT bench-fo$n: %{http_code}\n" -X PUT -H "Authorization: $token" \
          -H 'Content-Type: application/atom+xml' --data "$body" "http://127.0.0.1:$http/bench-fo$n" >&2
      fi
      token="$(sas_token "http://127.0.0.1:$http/bench-fo$n/Subscriptions/s$i")"
      body='<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>'
      curl -s -o /dev/null -w "PUT bench-fo$n/Subscriptions/s$i: %{http_code}\n" -X PUT \
        -H "Authorization: $token" -H 'Content-Type: application/atom+xml' --data "$body" \
        "http://127.0.0.1:$http/bench-fo$n/Subscriptions/s$i" >&2
    done
  done
}

start_ironbus() { # amqp-port http-port store
  start_server "$1" "127.0.0.1:$2" "$3" "$WORK/data-$1" "$WORK/ironbus-$1.log"
  PIDS+=("$SERVER_PID")
  if wait_for_port "$1" 0.2 100 "$SERVER_PID"; then ensure_entities "$2"; return 0; fi
  echo "ironbus on port $1 did not start: $(tail -5 "$WORK/ironbus-$1.log")" >&2
  exit 1
}
ROCKS_PID=; MEM_PID=
for broker in "${BROKERS[@]}"; do
  case $broker in
    rocksdb) start_ironbus "$ROCKS_PORT" "$ROCKS_HTTP" rocksdb; ROCKS_PID="${PIDS[-1]}";;
    memory)  start_ironbus "$MEM_PORT" "$MEM_HTTP" memory; MEM_PID="${PIDS[-1]}";;
    rabbitmq)
      "$PEERS/start-rabbitmq.sh"; RMQ_STARTED=1
      ( S="${PEERS_STATE:-${TMPDIR:-/tmp}/ironbus-peers}/rabbitmq" PORT="$RMQ_PORT"
        source "$PEERS/rabbitmq/env.sh"
        /usr/lib/rabbitmq/bin/rabbitmqctl -q import_definitions "$WORK/rabbitmq-definitions.json" )
      ;;
    *) echo "unknown broker $broker (rabbitmq, rocksdb, memory)" >&2; exit 1;;
  esac
done

TICKS="$(getconf CLK_TCK)"
# written_bytes HTTP_PORT: the store's written-bytes counter
written_bytes() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "ironbus_store_written_bytes_total" {print $2}'
}

# bench_run BROKER N MESSAGES MODE CONSUMERS_PER_SUB: one run; its JSON (plus CPU and store
# bytes) is appended to $OUT.
bench_run() {
  local broker="$1" n="$2" messages="$3" mode="$4" per_sub="$5" url address pid http="" i
  local from=()
  case $broker in
    rabbitmq) url="amqp://127.0.0.1:$RMQ_PORT"; address="/exchange/bench-fo$n"; AUTH=()
              pid="$(cat "${PEERS_STATE:-${TMPDIR:-/tmp}/ironbus-peers}/rabbitmq/beam.pid")"
              for i in $(seq "$n"); do from+=(--receive-from "/amq/queue/bench-fo$n-s$i"); done;;
    rocksdb|memory)
              if [ "$broker" = rocksdb ]; then url="amqp://127.0.0.1:$ROCKS_PORT"; pid="$ROCKS_PID"; http="$ROCKS_HTTP"
              else url="amqp://127.0.0.1:$MEM_PORT"; pid="$MEM_PID"; http="$MEM_HTTP"; fi
              address="bench-fo$n"; AUTH=(--sasl-plain "$SAS_USER:$SAS_KEY")
              for i in $(seq "$n"); do from+=(--receive-from "bench-fo$n/Subscriptions/s$i"); done;;
  esac
  local consumers=$((n * per_sub))
  [ "$per_sub" = 0 ] && from=()   # send only
  local load before after bytes_before="" bytes_after=""
  load="$(cut -d' ' -f1 /proc/loadavg)"
  [ -n "$http" ] && bytes_before="$(written_bytes "$http")"
  before="$(cpu_ticks "$pid")"
  /usr/bin/time -f "%U %S" -o "$WORK/client.time" "$BENCH" --url "$url" "${AUTH[@]}" \
    --address "$address" "${from[@]}" --producers "$PRODUCERS" --consumers "$consumers" \
    --mode "$mode" --accept-batch "$ACCEPT_BATCH" --messages "$messages" --size "$SIZE" --durable \
    --window "$WINDOW" --credit "$CREDIT" --timeout "$TIMEOUT" --client "$CLIENT" \
    > "$WORK/run.json" 2> "$WORK/run.err" || tail -2 "$WORK/run.err" >&2
  after="$(cpu_ticks "$pid")"
  [ -n "$http" ] && bytes_after="$(written_bytes "$http")"
  python3 - "$ROUND" "$broker" "$n" "$mode" "$per_sub" "$load" "$before" "$after" "$TICKS" \
      "$WORK/client.time" "$WORK/run.json" "$bytes_before" "$bytes_after" >> "$OUT" <<'PY'
import json, sys
(rnd, broker, n, mode, per_sub, load, before, after, ticks, client_time, run,
 bytes_before, bytes_after) = sys.argv[1:]
lines = open(run).read().splitlines()
report = json.loads(lines[-1]) if lines else {"error": "no report"}
user, system = (float(x) for x in open(client_time).read().split()[-2:])
received = max(report.get("received", 0) or report.get("sent", 0), 1)
expected = report.get("expected") or report.get("messages")
report.update(round=int(rnd), broker=broker, fanout=int(n), load=float(load),
              kind="send-only" if per_sub == "0" else mode,
              complete=per_sub == "0" and report.get("sent") == report.get("messages")
                       or report.get("received") == expected,
              broker_cpu_us_per_receipt=(int(after) - int(before)) / int(ticks) * 1e6 / received,
              client_cpu_us_per_receipt=(user + system) * 1e6 / received)
if bytes_before and bytes_after:
    report["store_bytes"] = float(bytes_after) - float(bytes_before)
    report["store_bytes_per_publish"] = report["store_bytes"] / max(report.get("sent", 0), 1)
print(json.dumps(report))
PY
  tail -1 "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)
extra = "  store %6.0f B/publish" % r["store_bytes_per_publish"] if "store_bytes_per_publish" in r else ""
print("round %d %-8s N=%-2d %-18s %8.0f recv/s  send %7.0f msg/s  p50 %7.1f ms  p99 %7.1f ms  broker %5.1f us/recv  client %5.1f us/recv  load %s%s%s" % (
    r["round"], r["broker"], r["fanout"], r["kind"], r.get("msgs_per_sec", 0),
    r.get("send_msgs_per_sec", 0), r.get("p50_ms") or 0, r.get("p99_ms") or 0,
    r["broker_cpu_us_per_receipt"], r["client_cpu_us_per_receipt"], r["load"], extra,
    "" if r["complete"] else "  INCOMPLETE: " + str(r.get("error"))))'
  sleep "$PAUSE"
}

: > "$OUT"
for ROUND in $(seq "$ROUNDS"); do
  for n in $FANOUTS; do
    messages=$((RECEIPTS / n)); [ "$messages" -lt "$MIN_MESSAGES" ] && messages="$MIN_MESSAGES"
    for broker in "${BROKERS[@]}"; do
      bench_run "$broker" "$n" "$messages" "$MODE" "$CONSUMERS_PER_SUB"
    done
  done
done

# Store bytes per publish (ironbus on RocksDB): a full peek-lock run (publish + settlement), a
# receive-and-delete run, and last a send-only run (publish alone; its messages stay behind).
ROUND=0
if [ -n "$ROCKS_PID" ] && [ -n "${BYTES_FANOUTS// }" ]; then
  for n in $BYTES_FANOUTS; do
    bench_run rocksdb "$n" "$BYTES_MESSAGES" peek-lock 1
    bench_run rocksdb "$n" "$BYTES_MESSAGES" receive-and-delete 1
  done
  for n in $BYTES_FANOUTS; do
    bench_run rocksdb "$n" "$BYTES_MESSAGES" peek-lock 0
  done
fi

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
timed = [r for r in rows if r["round"] > 0 and r["complete"]]
print("\nmedians over complete runs (range); rates are copies received per second summed over "
      "the N subscriptions; ratio = ironbus / RabbitMQ")
for n in dict.fromkeys(r["fanout"] for r in rows if r["round"] > 0):
    medians = {}
    for broker in ("rabbitmq", "rocksdb", "memory"):
        runs = [r for r in timed if r["fanout"] == n and r["broker"] == broker]
        if not runs:
            continue
        rate = [r["msgs_per_sec"] for r in runs]
        med = lambda key: statistics.median(r[key] or 0 for r in runs)
        medians[broker] = (statistics.median(rate), med("p99_ms"))
        print(f"N={n:<2} {broker:8} n={len(runs)} {medians[broker][0]:8.0f} "
              f"({min(rate):.0f}-{max(rate):.0f}) recv/s  send {med('send_msgs_per_sec'):7.0f} msg/s  "
              f"p50 {med('p50_ms'):7.1f}  p99 {med('p99_ms'):7.1f} ms  "
              f"broker {med('broker_cpu_us_per_receipt'):5.1f}  client "
              f"{med('client_cpu_us_per_receipt'):5.1f} us/recv")
    if "rabbitmq" in medians:
        rmq = medians["rabbitmq"]
        print(f"{'':5} ratio: " + "  ".join(
            f"{b} {medians[b][0] / rmq[0]:.2f}x rate, p99 {medians[b][1]:.1f} vs {rmq[1]:.1f} ms"
            for b in ("rocksdb", "memory") if b in medians))
bytes_rows = [r for r in rows if r["round"] == 0 and "store_bytes_per_publish" in r]
if bytes_rows:
    print("\nironbus RocksDB: store bytes written per publish (keys + values of puts, keys of "
          "deletes; logical batch bytes, not WAL/compaction I/O)")
    for r in bytes_rows:
        print(f"N={r['fanout']:<2} {r['kind']:18} {r['store_bytes_per_publish']:8.0f} B/publish  "
              f"({r['store_bytes']:.0f} B / {r.get('sent')} published"
              f"{'' if r['complete'] else ', INCOMPLETE'})")
PY
