# shellcheck shell=bash
# Shared by the bench scripts: sourced (`. "$ROOT/bench/lib.sh"`) from the workspace root, it only
# defines functions and the development namespace's key. server_of_rev needs TARGET (the
# workspace's target directory, `target_dir`); start_server needs SERVER and WORK (with
# config.json in it).

# The development namespace's root key (ironbus's default credentials).
# shellcheck disable=SC2034 # used by the scripts that source this
SAS_USER=RootManageSharedAccessKey
# shellcheck disable=SC2034
SAS_KEY=SAS_KEY_VALUE

# The workspace's target directory.
target_dir() {
  cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'
}

# SERVER and BENCH: the binaries the environment names, or, unless it names both, release builds
# of the working tree's (TARGET is then the target directory).
release_binaries() {
  if [ -z "${SERVER:-}" ] || [ -z "${BENCH:-}" ]; then
    cargo build --release -p ironbus -p ironbus-bench
    TARGET="$(target_dir)"
    SERVER="$TARGET/release/ironbus"
    BENCH="$TARGET/release/ironbus-bench"
  fi
}

# The server of a revision: its tree from `git archive`, built with the release profile in one
# shared target directory, so that dependencies of the same version (RocksDB among them) build
# once. Built once and kept in $TARGET/revs/bin/<sha>/ironbus; prints that path.
#
# `git archive` gives every file its commit's time, and cargo judges a workspace crate by the
# mtimes of its sources (listed relative to the package) against its last build in that target
# directory: an older commit built after a newer one looked fresh and got the newer one's binary.
# The tree is touched to now, so the revision's own crates always build.
server_of_rev() { # rev
  local sha bin src
  sha="$(git rev-parse --verify "$1^{commit}")"
  bin="$TARGET/revs/bin/$sha/ironbus"
  if [ ! -x "$bin" ]; then
    src="$TARGET/revs/src/$sha"
    rm -rf "$src" && mkdir -p "$src" "$(dirname "$bin")"
    git archive "$sha" | tar -x -C "$src"
    find "$src" -exec touch -h {} +
    echo "building ironbus at $1 ($sha)" >&2
    CARGO_TARGET_DIR="$TARGET/revs/target" cargo build --release -p ironbus \
      --manifest-path "$src/Cargo.toml" >&2
    cp "$TARGET/revs/target/release/ironbus" "$bin"
    rm -rf "$src"
    # Two revisions that differ in code must not share a binary.
    local other
    for other in "$TARGET"/revs/bin/*/ironbus; do
      if [ "$other" != "$bin" ] && cmp -s "$other" "$bin"; then
        echo "note: $1 built the same binary as $(basename "$(dirname "$other")") (a reused build?)" >&2
      fi
    done
  fi
  echo "$bin"
}

# The flags that turn off the listeners a revision has besides plain AMQP (an older revision
# lacks some of them), one per line.
listeners_off() { # server
  local listener
  for listener in --http-addr --https-addr --amqps-addr; do
    if "$1" --help | grep -q -- "$listener"; then printf '%s\noff\n' "$listener"; fi
  done
}

# Waits until something listens on 127.0.0.1:port: `tries` tries (50 unless given), `every`
# seconds apart; with `pid`, given up as soon as that process has exited. Returns 0 once something
# listens, 1 when the tries ran out, 2 when the process exited.
wait_for_port() { # port every [tries [pid]]
  for _ in $(seq "${3:-50}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then return 2; fi
    sleep "$2"
  done
  return 1
}

# Starts $SERVER in the background: plain AMQP on 127.0.0.1:port, ATOM over HTTP on `http` (an
# address, or off), no TLS listeners, $WORK/config.json, the store in data-dir, its output to log.
# SERVER_PID is its process id.
start_server() { # port http store data-dir log
  "$SERVER" --amqp-addr "127.0.0.1:$1" --http-addr "$2" --https-addr off --amqps-addr off \
    --config "$WORK/config.json" --store "$3" --data-dir "$4" > "$5" 2>&1 &
  SERVER_PID=$!
}

# Waits for the server start_server started to listen on port (`tries` tries, 0.2 s apart). If it
# exits first, says so with the end of its log and exits the script. Returns 1 when the tries ran
# out.
await_server() { # port tries log
  local status=0
  wait_for_port "$1" 0.2 "$2" "$SERVER_PID" || status=$?
  if [ "$status" = 2 ]; then
    echo "ironbus exited: $(tail -5 "$3")" >&2
    exit 1
  fi
  return "$status"
}

# Stops the server SERVER_PID names, if any, and waits for it: a stopping server still writes to
# its data directory, so it must be gone before that is removed.
stop_server() {
  if [ -n "${SERVER_PID:-}" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}

# For `trap cleanup_server EXIT`: stops the server (stop_server), then removes $WORK.
cleanup_server() {
  stop_server
  rm -rf "$WORK"
}

# The CPU time (user + system) process `pid` has used, in clock ticks.
cpu_ticks() { # pid
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# One run of a two-kind comparison, after the load generator wrote $WORK/run.json (its report,
# last line) and /usr/bin/time $WORK/client.time: appends the report to $OUT with the round, the
# kind, the load average, whether every message arrived, and the broker's (ticks `before` and
# `after`) and the client's CPU per message, with the fields of `extra` (a JSON object) over
# them; then prints the run's line, the extra fields last.
record_run() { # round kind load before after [extra]
  local extra="${6:-}"
  [ -n "$extra" ] || extra='{}'
  python3 - "$1" "$2" "$3" "$4" "$5" "$extra" "$(getconf CLK_TCK)" "$WORK/client.time" \
      "$WORK/run.json" >> "$OUT" <<'PY'
import json, sys
rnd, kind, load, before, after, extra, ticks, client_time, run = sys.argv[1:]
lines = open(run).read().splitlines()
report = json.loads(lines[-1]) if lines else {"error": "no report"}
user, system = (float(x) for x in open(client_time).read().split()[-2:])
received = max(report.get("received", 0), 1)
report.update(round=int(rnd), kind=kind, load=float(load),
              complete=report.get("received") == (report.get("expected") or report.get("messages")),
              broker_cpu_us_per_msg=(int(after) - int(before)) / int(ticks) * 1e6 / received,
              client_cpu_us_per_msg=(user + system) * 1e6 / received)
extra = json.loads(extra)
report.update(extra)
report["extra"] = sorted(extra)
print(json.dumps(report))
PY
  tail -1 "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)
shown = "".join(f"  {k} {r[k]}" for k in r["extra"] if k not in ("complete", "error"))
print("round %d %-8s %8.0f recv/s  send %7.0f msg/s  p50 %7.1f ms  p99 %7.1f ms  broker %5.1f us/msg  client %5.1f us/msg%s  load %s%s" % (
    r["round"], r["kind"], r.get("msgs_per_sec", 0), r.get("send_msgs_per_sec", 0),
    r.get("p50_ms") or 0, r.get("p99_ms") or 0, r["broker_cpu_us_per_msg"],
    r["client_cpu_us_per_msg"], shown, r["load"],
    "" if r["complete"] else "  INCOMPLETE: " + str(r.get("error"))))'
}

# The end of a two-kind comparison: medians over the complete runs of each kind in $OUT (receive
# rate with its range, send rate, p50, p99, broker and client CPU per message), then `other` /
# `base` for the rate, the broker's CPU per message and p99, and the rate ratio of each round.
summarize_pair() { # base other [note]
  python3 - "$OUT" "$1" "$2" "${3:-}" <<'PY'
import json, statistics, sys
out, base, other, note = sys.argv[1:]
rows = [json.loads(line) for line in open(out) if line.strip()]
print(f"\nmedians over complete runs (range){', ' + note if note else ''}; ratio = {other} / {base}")
medians = {}
for kind in (base, other):
    runs = [r for r in rows if r["kind"] == kind and r["complete"]]
    if not runs:
        print(f"{kind:8} no complete run")
        continue
    rate = [r["msgs_per_sec"] for r in runs]
    med = lambda key: statistics.median(r.get(key) or 0 for r in runs)
    medians[kind] = {"rate": statistics.median(rate), "cpu": med("broker_cpu_us_per_msg"),
                     "p99": med("p99_ms")}
    print(f"{kind:8} n={len(runs)} {medians[kind]['rate']:8.0f} ({min(rate):.0f}-{max(rate):.0f}) recv/s  "
          f"send {med('send_msgs_per_sec'):7.0f} msg/s  p50 {med('p50_ms'):7.1f}  "
          f"p99 {med('p99_ms'):7.1f} ms  broker {med('broker_cpu_us_per_msg'):5.1f}  "
          f"client {med('client_cpu_us_per_msg'):5.1f} us/msg")
if len(medians) == 2:
    a, b = medians[base], medians[other]
    ratio = lambda key: f"{b[key] / a[key]:.2f}" if a[key] else "n/a"
    print(f"{other} / {base}: rate {ratio('rate')}, broker CPU per message {ratio('cpu')}, "
          f"p99 {ratio('p99')}")
    pairs = {}
    for r in rows:
        if r["complete"]:
            pairs.setdefault(r["round"], {})[r["kind"]] = r["msgs_per_sec"]
    print("per-round rate ratios: " + ", ".join(
        f"{p[other] / p[base]:.2f}" for _, p in sorted(pairs.items()) if len(p) == 2))
PY
}
