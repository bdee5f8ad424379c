//! What the tasks that kill servers under load share: `cargo xtask crash` (one server) and
//! `cargo xtask cluster` (several nodes on one PostgreSQL).
//!
//! - the queues they declare, in the emulator's config format ([`QueueSpec`], [`config_json`]):
//!   partitioned, duplicate detection whose window outlasts the test, a short lock, and a
//!   delivery limit no kill pattern reaches;
//! - a seeded generator for kill schedules ([`SplitMix64`], [`time_seed`]);
//! - reading flags (`--flag value` or `--flag=value`, [`walk_flags`]) and their numbers
//!   ([`number`]).

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::compat::NAMESPACE;

/// One queue of a rig's config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueSpec<'a> {
    pub(crate) name: &'a str,
    /// 1: not partitioned.
    pub(crate) partitions: u32,
    pub(crate) dedup: bool,
    /// `""`: no auto-forwarding.
    pub(crate) forward_to: &'a str,
    pub(crate) lock_secs: u64,
}

impl QueueSpec<'_> {
    /// The queue in the emulator's format.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "Name": self.name,
            "Properties": {
                "DeadLetteringOnMessageExpiration": false,
                "DefaultMessageTimeToLive": "PT2H",
                "DuplicateDetectionHistoryTimeWindow": "PT1H",
                "ForwardDeadLetteredMessagesTo": "",
                "ForwardTo": self.forward_to,
                "LockDuration": format!("PT{}S", self.lock_secs),
                "MaxDeliveryCount": 1000,
                "RequiresDuplicateDetection": self.dedup,
                "RequiresSession": false,
                "EnablePartitioning": self.partitions > 1,
                "PartitionCount": self.partitions,
            },
        })
    }
}

/// The emulator-format config.json declaring `queues` in the development namespace.
pub(crate) fn config_json(queues: &[QueueSpec<'_>]) -> Value {
    let queues: Vec<Value> = queues.iter().map(|queue| queue.to_json()).collect();
    json!({
        "UserConfig": {
            "Namespaces": [{ "Name": NAMESPACE, "Queues": queues, "Topics": [] }],
            "Logging": { "Type": "File" },
        }
    })
}

/// Walks `args`: calls `on(flag, value)` for each flag, where `value()` takes the flag's value
/// (after `=`, else the next argument); returns the arguments after `--`.
pub(crate) fn walk_flags(
    args: &[String],
    mut on: impl FnMut(&str, &mut dyn FnMut() -> Result<String>) -> Result<()>,
) -> Result<Vec<String>> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return Ok(rest.cloned().collect());
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || -> Result<String> {
            match &inline {
                Some(value) => Ok(value.clone()),
                None => rest.next().cloned().with_context(|| format!("{flag} needs a value")),
            }
        };
        on(flag, &mut value)?;
    }
    Ok(Vec::new())
}

/// `text`, the value of `flag`, as a number of at least `min`.
pub(crate) fn number<T: std::str::FromStr + PartialOrd + From<u8> + Copy + std::fmt::Display>(
    flag: &str,
    text: &str,
    min: u8,
) -> Result<T> {
    match text.parse::<T>() {
        Ok(n) if n >= T::from(min) => Ok(n),
        _ => bail!("{flag} needs a whole number of at least {min}, got `{text}`"),
    }
}

/// splitmix64: a small seeded generator, enough for a kill schedule.
#[derive(Debug)]
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// A seed from the clock and the process id, for runs not given `--seed`.
pub(crate) fn time_seed() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    SplitMix64(now.as_nanos() as u64 ^ u64::from(std::process::id())).next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_schedule_is_seeded_and_in_range() {
        let schedule = |seed| {
            let mut rng = SplitMix64(seed);
            (0..100).map(|_| rng.between(500, 3000)).collect::<Vec<_>>()
        };
        assert_eq!(schedule(7), schedule(7));
        assert_ne!(schedule(7), schedule(8));
        assert!(schedule(7).iter().all(|ms| (500..=3000).contains(ms)));
    }

    #[test]
    fn flags_take_values_with_spaces_or_equals_and_stop_at_dashes() {
        let args: Vec<String> =
            "--a 1 --b=2 -- --c 3".split_whitespace().map(str::to_owned).collect();
        let mut seen = Vec::new();
        let after = walk_flags(&args, |flag, value| {
            seen.push((flag.to_owned(), value()?));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [("--a".to_owned(), "1".to_owned()), ("--b".to_owned(), "2".to_owned())]);
        assert_eq!(after, ["--c", "3"]);
        assert!(walk_flags(&["--a".to_owned()], |_, value| value().map(drop)).is_err());
    }

    #[test]
    fn numbers_below_the_minimum_are_refused() {
        assert_eq!(number::<u32>("--n", "3", 1).unwrap(), 3);
        assert!(number::<u32>("--n", "0", 1).is_err());
        assert!(number::<u32>("--n", "x", 0).is_err());
    }

    #[test]
    fn a_queue_spec_gives_every_emulator_property() {
        let spec =
            QueueSpec { name: "q", partitions: 16, dedup: true, forward_to: "", lock_secs: 10 };
        let config = config_json(&[spec]);
        let queue = &config["UserConfig"]["Namespaces"][0]["Queues"][0];
        assert_eq!(queue["Name"], "q");
        assert_eq!(queue["Properties"]["PartitionCount"], 16);
        assert_eq!(queue["Properties"]["EnablePartitioning"], true);
        assert_eq!(queue["Properties"]["LockDuration"], "PT10S");
        let one = QueueSpec { partitions: 1, ..spec }.to_json();
        assert_eq!(one["Properties"]["EnablePartitioning"], false);
    }
}
