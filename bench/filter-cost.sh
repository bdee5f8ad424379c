#!/usr/bin/env bash
# Filter cost: the publish rate to a topic with 1 subscription ($Default) against one with
# SUBSCRIPTIONS subscriptions whose SQL filters are all distinct and of which one matches
# (s0: `sys.Label IS NULL`; s1..: `sys.Label = 'L<i>'`; the load generator's messages carry no
# Label). ironbus on RocksDB (sync durability), send only (`--consumers 0`), alternating rounds;
# prints each run and the medians and their ratio. The issue's target: the ratio is >= 0.5.
#
#   bench/filter-cost.sh                       # 3 rounds of 150,000 messages per topic
#   ROUNDS=5 MESSAGES=300000 bench/filter-cost.sh
#
# Env: ROUNDS (3), MESSAGES (150000), SUBSCRIPTIONS (100), PRODUCERS (2), SIZE (1024),
# SERVER and BENCH (binaries to use instead of building release ones), PAUSE (1).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-3}"
MESSAGES="${MESSAGES:-150000}"
SUBSCRIPTIONS="${SUBSCRIPTIONS:-100}"
PRODUCERS="${PRODUCERS:-2}"
SIZE="${SIZE:-1024}"
PAUSE="${PAUSE:-1}"
PORT=5697
WORK="$(mktemp -d)"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
release_binaries

python3 - "$SUBSCRIPTIONS" > "$WORK/config.json" <<'PY'
import json, sys
n = int(sys.argv[1])
def sub(i, expression):
    return {"Name": f"s{i}", "Properties": {}, "Rules": [{"Name": "r", "Properties": {
        "FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}}]}
subs = [sub(0, "sys.Label IS NULL")] + [sub(i, f"sys.Label = 'L{i}'") for i in range(1, n)]
print(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [
    {"Name": "one", "Properties": {}, "Subscriptions": [{"Name": "s0", "Properties": {}}]},
    {"Name": "many", "Properties": {}, "Subscriptions": subs}]}]}}))
PY

start_server "$PORT" off rocksdb "$WORK/data" "$WORK/server.log"
trap cleanup_server EXIT
wait_for_port "$PORT" 0.2 || true

: > "$WORK/runs"
for round in $(seq "$ROUNDS"); do
  for topic in one many; do
    line="$("$BENCH" --url "amqp://127.0.0.1:$PORT" --address "$topic" --consumers 0 \
      --producers "$PRODUCERS" --messages "$MESSAGES" --size "$SIZE" --durable --window 100 \
      --sasl-plain "$SAS_USER:$SAS_KEY" | tail -1)"
    rate="$(printf '%s' "$line" | python3 -c 'import json,sys; print(json.load(sys.stdin)["send_msgs_per_sec"])')"
    echo "round $round  $topic  $rate msg/s published"
    echo "$topic $rate" >> "$WORK/runs"
    sleep "$PAUSE"
  done
done
python3 - "$WORK/runs" "$SUBSCRIPTIONS" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    topic, rate = line.split()
    rates.setdefault(topic, []).append(float(rate))
one, many = statistics.median(rates["one"]), statistics.median(rates["many"])
print(f"median: 1 subscription {one:,.0f} msg/s; {sys.argv[2]} filtered subscriptions "
      f"{many:,.0f} msg/s; ratio {many / one:.2f}")
PY
