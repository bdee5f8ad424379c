//! Test support for store implementations and for tests that reach into a broker's storage
//! (feature `testing`; never part of a production build).
//!
//! - [`conformance`]: the behaviours every [`Store`] must show, one async
//!   function each, and [`store_conformance_suite!`](crate::store_conformance_suite), which
//!   turns them into one named test per case. Every store crate invokes it once.
//! - [`FaultyStore`]: wraps a store and injects outages (whole store, one key prefix, the next
//!   few writes), for testing how the core copes with a failing store.
//! - [`LimitedStore`]: wraps a store and gives it write limits, recording the largest batch it
//!   was handed, for testing that the core keeps within a store's limits.
//! - [`RecordingStore`]: wraps a store and records every batch it applied, in order, for
//!   testing what the core wrote (nothing under a deleted entity after its delete).
//! - [`backlog`]: a large backlog filled, recovered after a restart and drained, on the
//!   stores a benchmark gives it (each store crate's `benches/backlog.rs`).
//! - [`TempDir`]: a unique scratch directory for stores that live on disk.
//! - [`keys`]: the store's key layout, for tests that reach one partition's records (the
//!   layout is the core's own business: only tests see it).
//! - [`partition_key_prefix`] and [`store_for`]: where a broker keeps one partition, to make
//!   just that partition fail (with a [`FaultyStore`]) or to look at its records.

pub mod backlog;
pub mod conformance;
mod faulty;
mod limited;
mod recording;
mod temp_dir;

use std::sync::Arc;

use bytes::Bytes;

use crate::keys::EntityId;
use crate::store::Store;
use crate::types::PartitionId;
use crate::{Broker, Result};

pub use faulty::FaultyStore;
pub use limited::LimitedStore;
pub use recording::RecordingStore;
pub use temp_dir::TempDir;

/// The store's key layout (`crate::keys`, private to the core), for tests that reach one
/// partition's records.
pub mod keys {
    pub use crate::keys::*;
}

/// The store key prefix under which partition `partition` of the queue or topic `name` keeps
/// all its records: [`FaultyStore::fail_prefix`] of it makes that partition unavailable.
pub fn partition_key_prefix(broker: &Broker, name: &str, partition: PartitionId) -> Result<Bytes> {
    broker.partition_key_prefix(name, partition)
}

/// The store of one partition of an entity, among the stores the broker was opened on.
pub fn store_for(broker: &Broker, entity: EntityId, partition: PartitionId) -> Arc<dyn Store> {
    broker.store_for(entity, partition).clone()
}

/// Expands to a module `$suite` with one `#[tokio::test]` per conformance case, named after the
/// case (see [`testing::conformance`](crate::testing::conformance)).
///
/// ```ignore
/// // Every case runs against a fresh store from the closure.
/// ironbus_core::store_conformance_suite!(memory, || async { Arc::new(MemoryStore::new()) });
///
/// // A durable store adds the durability cases, which drop a store and open it again at the
/// // same directory.
/// ironbus_core::store_conformance_suite!(
///     rocksdb,
///     || async { Arc::new(RocksStore::open(TempDir::new("rocks").keep()).unwrap()) },
///     durable: |dir: PathBuf| async move { Arc::new(RocksStore::open(dir).unwrap()) },
/// );
/// ```
///
/// The first closure returns a future of `Arc<S>` for some `S: Store` (or `Arc<dyn Store>`);
/// the `durable:` closure takes the directory and returns the same. Names in the closures
/// resolve as at the invocation site. The invoking crate needs `tokio` (features `macros` and
/// `rt-multi-thread`) as a dev-dependency; the tests run on a two-thread runtime so that the
/// concurrency cases are concurrent.
#[macro_export]
macro_rules! store_conformance_suite {
    ($suite:ident, $open:expr $(, durable: $open_at:expr)? $(,)?) => {
        mod $suite {
            #[allow(unused_imports)]
            use super::*;

            $crate::store_conformance_suite!(@cases $open;
                // Keep in step with the cases in `testing/conformance{,/*}.rs` (a test checks).
                get_missing_key_returns_none,
                put_then_get_returns_value,
                put_overwrites_previous_value,
                empty_value_is_not_a_missing_key,
                delete_removes_key,
                delete_missing_key_is_ok,
                large_value_round_trips,
                healthy_store_reports_healthy,
                empty_batch_is_ok,
                batch_applies_every_operation,
                later_op_in_batch_wins,
                delete_range_removes_half_open_range,
                delete_range_with_empty_end_is_unbounded,
                inverted_delete_range_removes_nothing,
                scan_returns_keys_in_byte_order,
                scan_respects_bounds_and_limit,
                scan_pages_from_last_key_plus_zero_byte,
                scan_with_empty_end_is_unbounded,
                scan_inverted_range_is_empty,
                prefix_scan_with_prefix_end,
                keys_with_ff_and_zero_bytes_order_correctly,
                concurrent_writers_all_land,
                scan_never_sees_half_applied_batch,
                guard_equal_to_current_value_applies_batch,
                guard_mismatch_applies_nothing_and_conflicts,
                guard_none_means_create_only,
                guard_on_key_deleted_earlier_sees_it_absent,
                guards_see_the_state_before_the_batch_own_operations,
                guard_only_batch_succeeds_or_fails_like_any,
                every_guard_of_a_batch_must_hold,
                concurrent_guarded_increments_lose_no_update,
                guard_sees_earlier_writes_of_the_same_group,
                batch_over_limits_is_refused_and_applies_nothing,
                model_based_random_ops_match_btreemap,
            );
            $(
                $crate::store_conformance_suite!(@durable $open_at;
                    data_survives_reopen,
                    batch_survives_reopen_atomically,
                    delete_range_survives_reopen,
                );
            )?
        }
    };
    (@cases $open:expr; $($case:ident),+ $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = ($open)().await;
                $crate::testing::conformance::$case(store).await;
            }
        )+
    };
    (@durable $open_at:expr; $($case:ident),+ $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::testing::conformance::$case($open_at).await;
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    /// Every public case of the suite is in the macro, and every name in the macro is a case.
    #[test]
    fn macro_lists_every_conformance_case() {
        let files = [
            include_str!("testing/conformance.rs"),
            include_str!("testing/conformance/guards.rs"),
            include_str!("testing/conformance/model.rs"),
            include_str!("testing/conformance/durability.rs"),
        ];
        let cases: Vec<&str> = files
            .iter()
            .flat_map(|file| file.lines())
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap_or_default())
            .collect();
        assert!(cases.len() > 20, "found too few cases: {cases:?}");
        let source = include_str!("testing.rs");
        let start = source.find("macro_rules! store_conformance_suite").expect("macro");
        let end = source[start..].find("(@cases $open:expr").expect("end of list") + start;
        let listed: Vec<&str> = source[start..end]
            .lines()
            .map(|line| line.trim().trim_end_matches(','))
            .filter(|word| {
                !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
            .collect();
        let mut sorted_cases = cases.clone();
        sorted_cases.sort_unstable();
        let mut sorted_listed = listed.clone();
        sorted_listed.sort_unstable();
        assert_eq!(sorted_listed, sorted_cases, "macro list vs the cases in testing/conformance*");
    }
}
