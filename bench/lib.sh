# Shared by the bench scripts that compare ironbus revisions (side-by-side.sh with REVS,
# instructions.sh). Source it after setting TARGET (the workspace's target directory).

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

# Waits until something listens on 127.0.0.1:port (50 tries, `every` seconds apart).
wait_for_port() { # port every
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep "$2"
  done
  return 1
}
