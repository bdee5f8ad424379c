//! The writer thread: group commit, and the guards of guarded batches.
//!
//! **Architecture Invariant:** this thread is the only code that writes to the database. It
//! commits requests in the order they arrived on the channel; each request's operations are one
//! contiguous, in-order run of a group, and a group is one RocksDB write, so each request is
//! applied all-or-nothing and a caller is answered only after its group's write (and, in
//! [`Durability::Sync`], the log sync) has returned.
//!
//! When a request of a group carries guards, the writer first decides on every request in
//! arrival order (`guards::check`): a request whose guards hold against the database and the
//! requests accepted before it in the group is accepted; one whose guard does not hold is
//! answered with `Conflict` and left out of the group's write, and the others still commit. A
//! group without guards takes the path it always took: no read, no overlay, no allocation.
//!
//! A group's puts and deletes reach RocksDB sorted by key (a stable sort: operations on one key
//! keep their order, so the group ends in the same state), unless the group holds a range
//! delete, which must stay after the writes it covers and before those it does not. RocksDB's
//! memtable is a skip list that inserts cheaply next to the key it inserted last; in arrival
//! order a group hops between partitions and between each message's body and meta record, and
//! every hop searched the list afresh (a tenth of the broker's instructions per message).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use ironbus_core::store::{BatchOp, StoreError, WriteBatch};
use rocksdb::DB;
use tokio::sync::oneshot;

use crate::error::store_error;
use crate::format::{data_key_in, data_range};
use crate::guards;
use crate::options::Durability;

/// A group takes queued requests until it holds this many bytes of keys and values; the first
/// request of a group is taken whatever its size.
const MAX_GROUP_BYTES: usize = 4 << 20;

/// One caller's batch and where to send the outcome.
pub(crate) struct Request {
    pub(crate) batch: WriteBatch,
    pub(crate) reply: oneshot::Sender<Result<(), StoreError>>,
}

/// State the writer shares with the store.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) healthy: AtomicBool,
    /// RocksDB writes (groups) done, failed ones included.
    pub(crate) commits: AtomicU64,
    /// Caller batches carried by those writes.
    pub(crate) batches: AtomicU64,
    /// Makes the next group fail as if RocksDB had returned an I/O error.
    #[cfg(test)]
    pub(crate) fail_next_commit: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            healthy: AtomicBool::new(true),
            commits: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            #[cfg(test)]
            fail_next_commit: AtomicBool::new(false),
        }
    }
}

/// Appends `op` to `group`, its keys under the data tag, building each point key in `key` (one
/// buffer for the whole group, instead of an allocation per key). An empty range is dropped (it
/// removes nothing, and RocksDB must not see an inverted range).
fn append(group: &mut rocksdb::WriteBatch, op: &BatchOp, key: &mut Vec<u8>) {
    match op {
        BatchOp::Put { key: user, value } => group.put(data_key_in(key, user), value),
        BatchOp::Delete { key: user } => group.delete(data_key_in(key, user)),
        BatchOp::DeleteRange { start, end } => {
            if let Some((start, end)) = data_range(start, end) {
                group.delete_range(start, end);
            }
        }
    }
}

/// An upper bound on the bytes RocksDB's write batch takes for `ops`: its 12-byte header, and
/// per record a type byte, the data tag and two length prefixes of at most 5 bytes each. The
/// batch is allocated once at this size instead of growing (and copying itself) as it fills.
fn encoded_bound(ops: &[&BatchOp]) -> usize {
    12 + ops
        .iter()
        .map(|op| {
            12 + match op {
                BatchOp::Put { key, value } => key.len() + value.len(),
                BatchOp::Delete { key } => key.len(),
                BatchOp::DeleteRange { start, end } => start.len() + end.len() + 1,
            }
        })
        .sum::<usize>()
}

/// The operations of `batches` in the order the group writes them: by key (stably) when there
/// is no range delete among them, else as they came (see the module docs).
fn in_write_order<'a>(batches: impl Iterator<Item = &'a WriteBatch>) -> Vec<&'a BatchOp> {
    let mut ops: Vec<&BatchOp> = batches.flat_map(|batch| batch.ops()).collect();
    if !ops.iter().any(|op| matches!(op, BatchOp::DeleteRange { .. })) {
        ops.sort_by(|a, b| point_key(a).cmp(point_key(b)));
    }
    ops
}

fn point_key(op: &BatchOp) -> &[u8] {
    match op {
        BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        BatchOp::DeleteRange { start, .. } => start,
    }
}

/// Runs until every sender is gone: commits queued requests in groups, one write each.
pub(crate) fn run(
    db: Arc<DB>,
    requests: Receiver<Request>,
    shared: Arc<Shared>,
    durability: Durability,
) {
    let mut write_options = rocksdb::WriteOptions::default();
    write_options.set_sync(durability == Durability::Sync);
    write_options.disable_wal(false);
    // A request that did not fit in the previous group opens the next one.
    let mut carried: Option<Request> = None;
    loop {
        let first = match carried.take() {
            Some(request) => request,
            None => match requests.recv() {
                Ok(request) => request,
                Err(_) => break,
            },
        };
        let mut bytes = first.batch.bytes();
        let mut group = vec![first];
        while bytes < MAX_GROUP_BYTES {
            match requests.try_recv() {
                Ok(request) => {
                    let size = request.batch.bytes();
                    if bytes + size > MAX_GROUP_BYTES {
                        carried = Some(request);
                        break;
                    }
                    bytes += size;
                    group.push(request);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        commit_group(&db, group, &write_options, &shared);
    }
    if durability == Durability::Relaxed {
        // A clean close leaves nothing unsynced.
        if let Err(e) = db.flush_wal(true) {
            tracing::warn!(error = %e, "rocksdb: syncing the write-ahead log on close failed");
        }
    }
}

/// Commits one group and answers every request in it. A caller that stopped waiting (its
/// future was dropped) needs no answer, so a failed send is ignored.
pub(crate) fn commit_group(
    db: &DB,
    group: Vec<Request>,
    write_options: &rocksdb::WriteOptions,
    shared: &Shared,
) {
    match group.iter().rposition(|request| !request.batch.guards().is_empty()) {
        None => {
            let batches = group.iter().map(|request| &request.batch);
            let result = commit(db, batches, group.len(), write_options, shared);
            for request in group {
                let _ = request.reply.send(result.clone());
            }
        }
        Some(last_guarded) => {
            let verdicts =
                guards::check(db, group.iter().map(|request| &request.batch), last_guarded);
            let accepted = verdicts.iter().filter(|verdict| verdict.is_ok()).count();
            let batches = group
                .iter()
                .zip(&verdicts)
                .filter(|(_, verdict)| verdict.is_ok())
                .map(|(request, _)| &request.batch);
            let result = commit(db, batches, accepted, write_options, shared);
            for (request, verdict) in group.into_iter().zip(verdicts) {
                let _ = request.reply.send(verdict.and_then(|()| result.clone()));
            }
        }
    }
}

/// Writes `batches` (`count` of them) as one RocksDB write batch and records the outcome in
/// `shared`. Nothing to write (every batch was refused, or held only guards or empty ranges)
/// makes no write.
fn commit<'a>(
    db: &DB,
    batches: impl Iterator<Item = &'a WriteBatch>,
    count: usize,
    write_options: &rocksdb::WriteOptions,
    shared: &Shared,
) -> Result<(), StoreError> {
    let ops = in_write_order(batches);
    let mut merged = rocksdb::WriteBatch::with_capacity_bytes(encoded_bound(&ops));
    let mut key = Vec::new();
    for op in ops {
        append(&mut merged, op, &mut key);
    }
    if merged.is_empty() {
        return Ok(());
    }
    #[cfg(test)]
    let result = if shared.fail_next_commit.swap(false, Ordering::Relaxed) {
        Err(StoreError::unavailable("write: injected I/O error"))
    } else {
        db.write_opt(merged, write_options).map_err(|e| store_error("write", e))
    };
    #[cfg(not(test))]
    let result = db.write_opt(merged, write_options).map_err(|e| store_error("write", e));
    shared.commits.fetch_add(1, Ordering::Relaxed);
    shared.batches.fetch_add(count as u64, Ordering::Relaxed);
    match &result {
        Ok(()) => shared.healthy.store(true, Ordering::Release),
        Err(e) => {
            tracing::warn!(error = %e, batches = count, "rocksdb: group commit failed");
            shared.healthy.store(false, Ordering::Release);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use ironbus_core::store::StoreErrorKind;
    use ironbus_core::testing::TempDir;

    use super::*;
    use crate::format::data_key;

    type Outcome = oneshot::Receiver<Result<(), StoreError>>;

    fn request(build: impl FnOnce(&mut WriteBatch)) -> (Request, Outcome) {
        let mut batch = WriteBatch::new();
        build(&mut batch);
        let (reply, outcome) = oneshot::channel();
        (Request { batch, reply }, outcome)
    }

    fn expect(value: &'static [u8]) -> Option<Bytes> {
        Some(Bytes::from_static(value))
    }

    /// Commits `group` as one group and returns each request's answer.
    fn commit_as_one_group(
        db: &DB,
        shared: &Shared,
        group: Vec<(Request, Outcome)>,
    ) -> Vec<String> {
        let (requests, outcomes): (Vec<_>, Vec<_>) = group.into_iter().unzip();
        commit_group(db, requests, &rocksdb::WriteOptions::default(), shared);
        outcomes
            .into_iter()
            .map(|mut outcome| match outcome.try_recv().expect("every request is answered") {
                Ok(()) => "ok".to_owned(),
                Err(e) if e.kind == StoreErrorKind::Conflict => "conflict".to_owned(),
                Err(e) => format!("error: {e}"),
            })
            .collect()
    }

    fn stored(db: &DB, key: &[u8]) -> Option<Vec<u8>> {
        db.get(data_key(key)).unwrap()
    }

    #[test]
    fn guards_see_the_accepted_requests_before_them_in_the_group() {
        let dir = TempDir::new("rocks-writer-guards");
        let db = DB::open_default(dir.path()).unwrap();
        let shared = Shared::new();
        let setup = vec![request(|b| {
            b.put(&b"r/a"[..], &b"old"[..]);
            b.put(&b"z"[..], &b"old"[..]);
        })];
        assert_eq!(commit_as_one_group(&db, &shared, setup), ["ok"]);

        let group = vec![
            // An unguarded request before guarded ones: its put counts for them.
            request(|b| b.put(&b"k"[..], &b"1"[..])),
            request(|b| {
                b.require(&b"k"[..], expect(b"1"));
                b.put(&b"k"[..], &b"2"[..]);
            }),
            // Sees k = 2, not the database's (absent) nor the first request's 1: refused, and its
            // put of x must count for nobody after it.
            request(|b| {
                b.require(&b"k"[..], expect(b"1"));
                b.put(&b"x"[..], &b"refused"[..]);
                b.delete(&b"z"[..]);
            }),
            request(|b| {
                b.require(&b"x"[..], None);
                b.put(&b"x"[..], &b"3"[..]);
            }),
            request(|b| b.delete_range(&b"r/"[..], &b"r0"[..])),
            // r/a is in the database, but deleted by the range earlier in the group.
            request(|b| {
                b.require(&b"r/a"[..], None);
                b.require(&b"z"[..], expect(b"old"));
                b.put(&b"r/a"[..], &b"new"[..]);
            }),
            request(|b| b.require(&b"r/a"[..], expect(b"old"))),
            request(|b| b.require(&b"k"[..], expect(b"2"))),
            // After the last guarded request: committed, never read by a guard.
            request(|b| b.put(&b"after"[..], &b"4"[..])),
        ];
        assert_eq!(
            commit_as_one_group(&db, &shared, group),
            ["ok", "ok", "conflict", "ok", "ok", "ok", "conflict", "ok", "ok"]
        );
        assert_eq!(stored(&db, b"k").as_deref(), Some(&b"2"[..]));
        assert_eq!(stored(&db, b"x").as_deref(), Some(&b"3"[..]), "the refused put is left out");
        assert_eq!(stored(&db, b"z").as_deref(), Some(&b"old"[..]), "the refused delete too");
        assert_eq!(stored(&db, b"r/a").as_deref(), Some(&b"new"[..]));
        assert_eq!(stored(&db, b"after").as_deref(), Some(&b"4"[..]));
        assert_eq!(shared.commits.load(Ordering::Relaxed), 2, "one write per group");
        assert_eq!(shared.batches.load(Ordering::Relaxed), 1 + 7, "refused batches not counted");
    }

    #[test]
    fn a_group_written_in_key_order_ends_as_its_requests_in_arrival_order_would() {
        let dir = TempDir::new("rocks-writer-order");
        let db = DB::open_default(dir.path()).unwrap();
        let shared = Shared::new();
        let group = vec![
            request(|b| {
                b.put(&b"c"[..], &b"1"[..]);
                b.put(&b"a"[..], &b"1"[..]);
            }),
            request(|b| {
                b.delete(&b"a"[..]);
                b.put(&b"b"[..], &b"2"[..]);
                b.put(&b"c"[..], &b"2"[..]);
            }),
            request(|b| {
                b.put(&b"a"[..], &b"3"[..]);
                b.delete(&b"c"[..]);
            }),
        ];
        assert_eq!(commit_as_one_group(&db, &shared, group), ["ok", "ok", "ok"]);
        assert_eq!(stored(&db, b"a").as_deref(), Some(&b"3"[..]), "the last write of a wins");
        assert_eq!(stored(&db, b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(stored(&db, b"c"), None, "the last write of c, a delete, wins");
    }

    #[test]
    fn a_range_delete_keeps_its_place_among_the_groups_writes() {
        let dir = TempDir::new("rocks-writer-range-order");
        let db = DB::open_default(dir.path()).unwrap();
        let shared = Shared::new();
        let group = vec![
            request(|b| b.put(&b"r/b"[..], &b"before"[..])),
            request(|b| b.delete_range(&b"r/"[..], &b"r0"[..])),
            request(|b| b.put(&b"r/a"[..], &b"after"[..])),
        ];
        assert_eq!(commit_as_one_group(&db, &shared, group), ["ok", "ok", "ok"]);
        assert_eq!(stored(&db, b"r/b"), None, "written before the range: deleted by it");
        assert_eq!(stored(&db, b"r/a").as_deref(), Some(&b"after"[..]), "written after it");
    }

    #[test]
    fn write_order_is_by_key_and_stable_unless_a_range_delete_is_in_the_group() {
        let keys = |ops: Vec<&BatchOp>| -> Vec<String> {
            ops.iter()
                .map(|op| match op {
                    BatchOp::Put { key, value } => format!(
                        "put {}={}",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(value)
                    ),
                    BatchOp::Delete { key } => format!("delete {}", String::from_utf8_lossy(key)),
                    BatchOp::DeleteRange { start, .. } => {
                        format!("range {}", String::from_utf8_lossy(start))
                    }
                })
                .collect()
        };
        let mut first = WriteBatch::new();
        first.put(&b"b"[..], &b"1"[..]);
        first.put(&b"a"[..], &b"1"[..]);
        let mut second = WriteBatch::new();
        second.delete(&b"b"[..]);
        second.put(&b"a"[..], &b"2"[..]);
        assert_eq!(
            keys(in_write_order([&first, &second].into_iter())),
            ["put a=1", "put a=2", "put b=1", "delete b"]
        );
        second.delete_range(&b"a"[..], &b"c"[..]);
        assert_eq!(
            keys(in_write_order([&first, &second].into_iter())),
            ["put b=1", "put a=1", "delete b", "put a=2", "range a"]
        );
    }

    #[test]
    fn a_group_whose_every_request_is_refused_writes_nothing() {
        let dir = TempDir::new("rocks-writer-refused");
        let db = DB::open_default(dir.path()).unwrap();
        let shared = Shared::new();
        let group = vec![
            request(|b| {
                b.require(&b"k"[..], expect(b"1"));
                b.put(&b"k"[..], &b"2"[..]);
            }),
            request(|b| b.require(&b"missing"[..], expect(b""))),
        ];
        assert_eq!(commit_as_one_group(&db, &shared, group), ["conflict", "conflict"]);
        assert_eq!(stored(&db, b"k"), None);
        assert_eq!(shared.commits.load(Ordering::Relaxed), 0, "no write for nothing to write");
        // A guard-only request that holds needs no write either.
        let group = vec![request(|b| b.require(&b"k"[..], None))];
        assert_eq!(commit_as_one_group(&db, &shared, group), ["ok"]);
        assert_eq!(shared.commits.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failed_write_fails_the_accepted_requests_and_keeps_the_conflicts() {
        let dir = TempDir::new("rocks-writer-failed");
        let db = DB::open_default(dir.path()).unwrap();
        let shared = Shared::new();
        shared.fail_next_commit.store(true, Ordering::Relaxed);
        let group = vec![
            request(|b| {
                b.require(&b"k"[..], None);
                b.put(&b"k"[..], &b"1"[..]);
            }),
            request(|b| {
                b.require(&b"k"[..], None);
                b.put(&b"k"[..], &b"2"[..]);
            }),
        ];
        let answers = commit_as_one_group(&db, &shared, group);
        assert!(answers[0].starts_with("error: store unavailable"), "{answers:?}");
        assert_eq!(answers[1], "conflict", "refused against the first request, as decided");
        assert_eq!(stored(&db, b"k"), None);
        assert!(!shared.healthy.load(Ordering::Acquire));
    }
}
