//! The duplicate-detection window of one partition: which message ids were seen, until when.
//!
//! A message id seen at time `t` is a duplicate until `t + window`; a duplicate does not extend
//! the window. On a partitioned entity the key is the MessageId together with the PartitionKey
//! (messages with the same id but different partition keys are distinct), see [`DedupKey::of`].
//!
//! The partition records every id it admits (scheduled messages too) in its cycle's write,
//! one duplicate-detection record per id with its expiry, and drops the record when the window
//! ends; a rebuild restores the window from those records, so it survives restarts. A
//! duplicate is answered as a successful send and dropped. The window is the entity's
//! DuplicateDetectionHistoryTimeWindow: 20 s to 7 days, 10 minutes by default.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::message::MessageProperties;
use crate::types::Timestamp;

/// What makes a message unique for duplicate detection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DedupKey(pub String);

impl DedupKey {
    /// The key of a message, or `None` if it has no MessageId (nothing to detect it by).
    pub fn of(props: &MessageProperties, partitioned: bool) -> Option<DedupKey> {
        let id = props.message_id.as_deref()?;
        match (partitioned, props.partition_key.as_deref().or(props.session_id.as_deref())) {
            (true, Some(key)) => Some(DedupKey(format!("{id}\u{0}{key}"))),
            _ => Some(DedupKey(id.to_owned())),
        }
    }
}

/// Message ids seen recently, with their expiry.
#[derive(Debug, Default)]
pub struct DedupWindow {
    expiry: HashMap<DedupKey, Timestamp>,
    by_time: BTreeSet<(Timestamp, DedupKey)>,
}

impl DedupWindow {
    /// Whether `key` is a duplicate at `now`.
    pub fn contains(&self, key: &DedupKey, now: Timestamp) -> bool {
        self.expiry.get(key).is_some_and(|until| *until > now)
    }

    /// Records `key` as seen until `now + window`. Returns the expiry to persist.
    pub fn insert(&mut self, key: DedupKey, now: Timestamp, window: Duration) -> Timestamp {
        let until = now.saturating_add(window);
        self.restore(key, until);
        until
    }

    /// Records `key` as seen until `until` (used when rebuilding from the store).
    pub fn restore(&mut self, key: DedupKey, until: Timestamp) {
        if let Some(old) = self.expiry.insert(key.clone(), until) {
            self.by_time.remove(&(old, key.clone()));
        }
        self.by_time.insert((until, key));
    }

    /// Forgets every key whose window ended at or before `now`, returning them (to delete from
    /// the store).
    pub fn evict(&mut self, now: Timestamp) -> Vec<DedupKey> {
        let mut gone = Vec::new();
        while let Some((until, _)) = self.by_time.first() {
            if *until > now {
                break;
            }
            let (_, key) = self.by_time.pop_first().expect("first exists");
            self.expiry.remove(&key);
            gone.push(key);
        }
        gone
    }

    /// Forgets the first key whose window ended at or before `now`, returning it (to delete
    /// from the store); `None` when no window has ended.
    pub fn evict_one(&mut self, now: Timestamp) -> Option<DedupKey> {
        if self.by_time.first().is_none_or(|(until, _)| *until > now) {
            return None;
        }
        let (_, key) = self.by_time.pop_first()?;
        self.expiry.remove(&key);
        Some(key)
    }

    /// When the next key leaves the window.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.by_time.first().map(|(t, _)| *t)
    }

    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Timestamp = Timestamp::from_millis(1_000_000);
    const WINDOW: Duration = Duration::from_secs(60);

    fn key(s: &str) -> DedupKey {
        DedupKey(s.into())
    }

    #[test]
    fn duplicate_within_window_and_not_after() {
        let mut w = DedupWindow::default();
        w.insert(key("a"), T0, WINDOW);
        let cases = [
            ("same instant", 0, true),
            ("within window", 59_999, true),
            ("window end", 60_000, false),
            ("after window", 120_000, false),
        ];
        for (name, after_ms, duplicate) in cases {
            let now = Timestamp::from_millis(T0.as_millis() + after_ms);
            assert_eq!(w.contains(&key("a"), now), duplicate, "{name}");
        }
        assert!(!w.contains(&key("b"), T0));
    }

    #[test]
    fn partitioned_key_includes_partition_key() {
        let p = |id: &str, pk: Option<&str>| MessageProperties {
            message_id: Some(id.into()),
            partition_key: pk.map(Into::into),
            ..Default::default()
        };
        assert_ne!(DedupKey::of(&p("m", Some("a")), true), DedupKey::of(&p("m", Some("b")), true));
        assert_eq!(
            DedupKey::of(&p("m", Some("a")), false),
            DedupKey::of(&p("m", Some("b")), false)
        );
        assert_eq!(DedupKey::of(&MessageProperties::default(), true), None);
    }

    #[test]
    fn evicting_one_at_a_time_takes_only_ended_windows_in_time_order() {
        let mut w = DedupWindow::default();
        w.insert(key("a"), T0, Duration::from_secs(10));
        w.insert(key("b"), T0, Duration::from_secs(5));
        w.insert(key("c"), T0, Duration::from_secs(60));
        let now = T0.saturating_add(Duration::from_secs(10));
        assert_eq!(w.evict_one(now), Some(key("b")));
        assert_eq!(w.evict_one(now), Some(key("a")));
        assert_eq!(w.evict_one(now), None, "c's window has not ended");
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn eviction_returns_expired_keys_in_time_order() {
        let mut w = DedupWindow::default();
        w.insert(key("a"), T0, Duration::from_secs(10));
        w.insert(key("b"), T0, Duration::from_secs(5));
        w.insert(key("c"), T0, Duration::from_secs(20));
        assert_eq!(w.next_expiry(), Some(T0.saturating_add(Duration::from_secs(5))));
        let gone = w.evict(T0.saturating_add(Duration::from_secs(10)));
        assert_eq!(gone, vec![key("b"), key("a")]);
        assert_eq!(w.len(), 1);
    }

    proptest! {
        #[test]
        fn window_matches_a_naive_model(
            ops in proptest::collection::vec((0u8..8, 0u64..120_000), 1..200)
        ) {
            let mut w = DedupWindow::default();
            let mut seen: Vec<(u8, i64)> = Vec::new(); // (id, first-seen time of the current window)
            let mut now = T0.as_millis();
            for (id, step) in ops {
                now += (step % 30_000) as i64;
                let t = Timestamp::from_millis(now);
                let model_dup = seen.iter().any(|(i, at)| *i == id && now < at + 60_000);
                prop_assert_eq!(w.contains(&key(&id.to_string()), t), model_dup);
                if !model_dup {
                    w.insert(key(&id.to_string()), t, WINDOW);
                    seen.retain(|(i, _)| *i != id);
                    seen.push((id, now));
                }
                w.evict(t);
            }
        }
    }
}
