#!/usr/bin/env bash
# Sessions benchmark: one ironbus (RocksDB, sync durability) with two 16-partition queues,
# bench-sessions (RequiresSession: true) and bench-plain, in alternating rounds with the same
# load generator (ironbus-bench) and the same flags. Each run preloads MESSAGES durable messages of
# SIZE bytes (--preload: every send acknowledged before consumers attach), then drains them with
# CONSUMERS consumers:
# - sessions: the messages carry SessionId session-0 .. session-(SESSIONS-1), round-robin, in
#   order per session; each consumer is an accept-next session receiver holding one session at a
#   time (accept the next session, drain it with a drain flow, accept its messages, detach,
#   accept the next);
# - plain: the same messages without SessionId, CONSUMERS plain receivers.
# Prints one line per run and, at the end, medians per configuration (receive rate, send rate,
# end-to-end p50/p99 — which include the time in the queue, since the load is preloaded — and
# for sessions accept-next p50/p99) and the sessions / plain rate ratio.
#
#   bench/sessions.sh                                 # 3 rounds, 1000 sessions x 100 messages
#   ROUNDS=5 SESSIONS=200 PER_SESSION=100 bench/sessions.sh
#
# Env: ROUNDS (3), SESSIONS (1000), PER_SESSION (100), CONSUMERS (4), PRODUCERS (2),
# PARTITIONS (16), SIZE (1024), CREDIT (100: also what one drain asks for), ACCEPT_BATCH (1),
# WINDOW (100), SESSION_WAIT_MS (5000), CONFIRM (set: session accepts unsettled, outcomes awaited
# before the detach; default settled, as on the plain queue), OUT (sessions.jsonl), TIMEOUT per
# run (600), PAUSE (2),
# SERVER and BENCH (binaries to use instead of building release ones).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-3}"
SESSIONS="${SESSIONS:-1000}"
PER_SESSION="${PER_SESSION:-100}"
CONSUMERS="${CONSUMERS:-4}"
PRODUCERS="${PRODUCERS:-2}"
PARTITIONS="${PARTITIONS:-16}"
SIZE="${SIZE:-1024}"
CREDIT="${CREDIT:-100}"
ACCEPT_BATCH="${ACCEPT_BATCH:-1}"
WINDOW="${WINDOW:-100}"
SESSION_WAIT_MS="${SESSION_WAIT_MS:-5000}"
OUT="${OUT:-sessions.jsonl}"
TIMEOUT="${TIMEOUT:-600}"
PAUSE="${PAUSE:-2}"
MESSAGES=$((SESSIONS * PER_SESSION))
WORK="$(mktemp -d)"
PORT="${PORT:-5691}"; HTTP="${HTTP_PORT:-5391}"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
release_binaries

python3 - "$PARTITIONS" > "$WORK/config.json" <<'PY'
import json, sys
partitions = int(sys.argv[1])
props = {"EnablePartitioning": True, "PartitionCount": partitions}
queues = [{"Name": "bench-sessions", "Properties": dict(props, RequiresSession=True)},
          {"Name": "bench-plain", "Properties": dict(props)}]
print(json.dumps({"UserConfig": {"Namespaces": [
    {"Name": "sbemulatorns", "Queues": queues, "Topics": []}]}}))
PY

trap cleanup_server EXIT

start_server "$PORT" "127.0.0.1:$HTTP" rocksdb "$WORK/data" "$WORK/ironbus.log"
await_server "$PORT" 150 "$WORK/ironbus.log" || true
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null \
  || { echo "ironbus did not start: $(tail -5 "$WORK/ironbus.log")" >&2; exit 1; }

TICKS="$(getconf CLK_TCK)"

# bench_run KIND (sessions | plain): one run; its JSON (plus broker CPU) is appended to $OUT.
bench_run() {
  local kind="$1" address extra=() load before after
  case $kind in
    sessions) address=bench-sessions
              extra=(--sessions "$SESSIONS" --session-wait-ms "$SESSION_WAIT_MS");;
    plain)    address=bench-plain;;
  esac
  load="$(cut -d' ' -f1 /proc/loadavg)"
  before="$(cpu_ticks "$SERVER_PID")"
  "$BENCH" --url "amqp://127.0.0.1:$PORT" --sasl-plain "$SAS_USER:$SAS_KEY" \
    --address "$address" "${extra[@]}" --preload --producers "$PRODUCERS" \
    --consumers "$CONSUMERS" --mode peek-lock --accept-batch "$ACCEPT_BATCH" ${CONFIRM:+--confirm-accepts} \
    --messages "$MESSAGES" --size "$SIZE" --durable --window "$WINDOW" --credit "$CREDIT" \
    --timeout "$TIMEOUT" --client wire > "$WORK/run.json" 2> "$WORK/run.err" \
    || tail -2 "$WORK/run.err" >&2
  after="$(cpu_ticks "$SERVER_PID")"
  python3 - "$ROUND" "$kind" "$load" "$before" "$after" "$TICKS" "$WORK/run.json" >> "$OUT" <<'PY'
import json, sys
rnd, kind, load, before, after, ticks, run = sys.argv[1:]
lines = open(run).read().splitlines()
report = json.loads(lines[-1]) if lines else {"error": "no report"}
received = max(report.get("received", 0), 1)
report.update(round=int(rnd), kind=kind, load=float(load),
              complete=report.get("received") == report.get("messages"),
              broker_cpu_us_per_msg=(int(after) - int(before)) / int(ticks) * 1e6 / received)
print(json.dumps(report))
PY
  tail -1 "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)
accept = ""
if r["kind"] == "sessions":
    accept = "  accept-next p50 %6.2f p99 %6.2f max %7.2f ms (%s accepts, %s timeouts, %s out of order, %s refused accepts)" % (
        r.get("accept_p50_ms") or 0, r.get("accept_p99_ms") or 0, r.get("accept_max_ms") or 0,
        r.get("sessions_accepted"), r.get("accept_timeouts"), r.get("out_of_order"), r.get("settles_refused"))
print("round %d %-8s %8.0f recv/s  send %7.0f msg/s  e2e p50 %8.1f p99 %8.1f ms  broker %5.1f us/msg  load %s%s%s" % (
    r["round"], r["kind"], r.get("msgs_per_sec", 0), r.get("send_msgs_per_sec", 0),
    r.get("p50_ms") or 0, r.get("p99_ms") or 0, r["broker_cpu_us_per_msg"], r["load"], accept,
    "" if r["complete"] else "  INCOMPLETE: " + str(r.get("error"))))'
  sleep "$PAUSE"
}

echo "sessions benchmark: $SESSIONS sessions x $PER_SESSION messages ($MESSAGES) of $SIZE B, durable," \
  "$PARTITIONS partitions, $CONSUMERS consumers, $PRODUCERS producers, $ROUNDS rounds; $(nproc) cores"
: > "$OUT"
for ROUND in $(seq "$ROUNDS"); do
  # Alternate which configuration goes first.
  if [ $((ROUND % 2)) = 1 ]; then order="sessions plain"; else order="plain sessions"; fi
  for kind in $order; do bench_run "$kind"; done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("\nmedians over complete runs (range); rates are messages received per second after the "
      "preload; ratio = sessions / plain")
med = {}
for kind in ("sessions", "plain"):
    runs = [r for r in rows if r["kind"] == kind and r["complete"]]
    if not runs:
        print(f"{kind:8} no complete run")
        continue
    m = lambda key: statistics.median(r.get(key) or 0 for r in runs)
    rate = [r["msgs_per_sec"] for r in runs]
    med[kind] = m("msgs_per_sec")
    accept = (f"  accept-next p50 {m('accept_p50_ms'):6.2f} p99 {m('accept_p99_ms'):6.2f} ms"
              if kind == "sessions" else "")
    print(f"{kind:8} n={len(runs)} {med[kind]:8.0f} ({min(rate):.0f}-{max(rate):.0f}) recv/s  "
          f"send {m('send_msgs_per_sec'):7.0f} msg/s  e2e p50 {m('p50_ms'):8.1f} "
          f"p99 {m('p99_ms'):8.1f} ms  broker {m('broker_cpu_us_per_msg'):5.1f} us/msg{accept}")
if len(med) == 2:
    print(f"ratio: sessions / plain = {med['sessions'] / med['plain']:.2f}")
PY
