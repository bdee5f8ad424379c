#!/usr/bin/env bash
# Lock renewals of the sync Python SDK from several threads, for one or more ironbus revisions
# in alternating rounds: the AutoLockRenewer's load (azure-servicebus's
# test_queue_receive_handler_with_autolockrenew_many_msgs renews 300 locks of 30 s from its
# thread pool). Each run starts the revision's server (release build, memory store, plain AMQP),
# and bench/renew.py sends MESSAGES messages, receives them and renews each lock once from
# THREADS threads sharing one connection. Prints one line per run and the median renewals per
# second per revision and thread count, with each revision's ratio to the first.
#
#   bench/renew.sh                                  # HEAD, 1 2 5 threads, 3 rounds
#   REVS="9d60c64 HEAD" ROUNDS=5 bench/renew.sh
#
# Env: REVS (HEAD), THREADS ("1 2 5"), MESSAGES (300), ROUNDS (3), OUT (renew.jsonl). The client is
# the azure-servicebus version compat/python/requirements.txt pins, in a venv under the target
# directory.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
read -r -a REVS <<< "${REVS:-HEAD}"
read -r -a THREADS <<< "${THREADS:-1 2 5}"
MESSAGES="${MESSAGES:-300}"
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:-renew.jsonl}"
PORT=5697
WORK="$(mktemp -d)"

cd "$ROOT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TARGET="$(target_dir)"

VENV="$TARGET/bench-python"
SDK="$(grep '^azure-servicebus==' compat/python/requirements.txt)"
if ! "$VENV/bin/python" -c 'import azure.servicebus' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --disable-pip-version-check -q "$SDK"
fi

declare -A SERVERS
for rev in "${REVS[@]}"; do SERVERS[$rev]="$(server_of_rev "$rev")"; done

cat > "$WORK/config.json" <<'EOF'
{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
  {"Name": "renew", "Properties": {"LockDuration": "PT1M"}}], "Topics": []}]}}
EOF
CONNECTION="Endpoint=sb://127.0.0.1:$PORT;SharedAccessKeyName=$SAS_USER;SharedAccessKey=$SAS_KEY;UseDevelopmentEmulator=true"

SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

: > "$OUT"
for round in $(seq "$ROUNDS"); do
  for rev in "${REVS[@]}"; do
    server="${SERVERS[$rev]}"
    mapfile -t flags < <(listeners_off "$server")
    "$server" --amqp-addr "127.0.0.1:$PORT" "${flags[@]}" --store memory \
      --config "$WORK/config.json" > "$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    wait_for_port "$PORT" 0.1 || { cat "$WORK/server.log" >&2; exit 1; }
    for threads in "${THREADS[@]}"; do
      line="$("$VENV/bin/python" bench/renew.py "$CONNECTION" renew "$MESSAGES" "$threads")"
      line="{\"rev\": \"$rev\", \"round\": $round, ${line#\{}"
      echo "$line"
      echo "$line" >> "$OUT"
    done
    kill "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=""
  done
done

python3 - "$OUT" "${REVS[@]}" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
revs = sys.argv[2:]
print(f"{'revision':<12} {'threads':>7} {'renewals/s':>11} {'p90 ms':>8} {'/ first':>8}")
for threads in sorted({r["threads"] for r in runs}):
    first = None
    for rev in revs:
        mine = [r for r in runs if r["rev"] == rev and r["threads"] == threads]
        rate = statistics.median(r["per_s"] for r in mine)
        p90 = statistics.median(r["p90_ms"] for r in mine)
        first = first or rate
        print(f"{rev:<12} {threads:>7} {rate:>11.1f} {p90:>8.1f} {rate / first:>8.2f}")
EOF
