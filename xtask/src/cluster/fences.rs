//! What PostgreSQL itself holds after a run, read with `psql` from `ironbus_store_0` (the rig's
//! nodes run one store): the evidence that no write of a fenced-off owner exists.
//!
//! - **Fences** (`core/src/fence.rs`, key `p <entity u64> <partition u16> o`, value the token,
//!   u64 big-endian) against **owner rows** (`cluster/src/keys.rs` and `rows.rs`, key
//!   `c o <entity u64> <partition u16>`, value: a version byte, the token of the last claim,
//!   8 bytes unused, flags, the node id): every partition's fence must hold exactly the token
//!   of its owner row, that is of the last claim. A fence at another token means a claim moved
//!   it without the owner row following, or a write under a stale token.
//! - **Meta records** (tags `m`, `d`, `t`, `y`, `v` under a partition's prefix: a message exists
//!   exactly as long as its meta record does) after the driver drained the queue: there must be
//!   none. A message a stale owner stored after the fence moved would be one the new owner never
//!   rebuilt, so it would stay here, never delivered; a message any owner stored is delivered by
//!   the drain, completed and its meta record deleted. (Bodies, tag `b`, are deleted lazily by a
//!   range sweep per 1,024 sequence numbers, `core/src/partition/state/removal.rs`: some stay.)

use anyhow::{Context, Result};

use super::{progress, PARTITIONS};
use crate::postgres::Database;

/// One partition's fence and owner row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fence {
    /// The entity id and partition, as hex of the key (`<entity u64><partition u16>`).
    pub(super) partition: String,
    pub(super) token: u64,
    /// The owner row's token and node, `None` without an owner row.
    pub(super) owner: Option<(u64, String)>,
}

impl Fence {
    /// The partition number (the key's last two bytes).
    pub(super) fn number(&self) -> u64 {
        let tail = self.partition.get(self.partition.len().saturating_sub(4)..).unwrap_or("");
        u64::from_str_radix(tail, 16).unwrap_or(u64::MAX)
    }
}

const FENCES: &str = "SELECT encode(substring(f.key FROM 2 FOR 10), 'hex'), \
     encode(f.value, 'hex'), coalesce(encode(substring(o.value FROM 2 FOR 8), 'hex'), ''), \
     coalesce(convert_from(substring(o.value FROM 19), 'UTF8'), '') \
     FROM ironbus_store_0 f LEFT JOIN ironbus_store_0 o \
     ON o.key = '\\x636f'::bytea || substring(f.key FROM 2 FOR 10) \
     WHERE length(f.key) = 12 AND get_byte(f.key, 0) = 112 AND get_byte(f.key, 11) = 111 \
     ORDER BY f.key";

/// Meta records left, per partition and tag (m 109, d 100, t 116, y 121, v 118).
const LEFT: &str = "SELECT encode(substring(key FROM 2 FOR 10), 'hex'), chr(get_byte(key, 11)), \
     count(*) FROM ironbus_store_0 WHERE get_byte(key, 0) = 112 AND length(key) > 12 \
     AND get_byte(key, 11) IN (109, 100, 116, 121, 118) GROUP BY 1, 2 ORDER BY 1, 2";

/// What PostgreSQL holds at the end: fences at their last claims' tokens, no message left.
pub(super) fn check(database: &Database) -> Result<Vec<String>> {
    let fences = read(database)?;
    let mut failures = mismatched(&fences);
    if fences.len() != usize::from(PARTITIONS) {
        failures.push(format!(
            "PostgreSQL holds {} fences, not one per partition ({})",
            fences.len(),
            PARTITIONS
        ));
    }
    let left = leftover_messages(database)?;
    if !left.is_empty() {
        failures.push(format!(
            "meta records left in PostgreSQL after the drain (messages stored, never delivered: \
             writes the partition's rebuild did not see): {}",
            left.join("; ")
        ));
    }
    if failures.is_empty() {
        let tokens: Vec<String> = fences
            .iter()
            .map(|f| {
                let owner = f.owner.as_ref().map_or("none", |(_, node)| node.as_str());
                format!("{}:{}@{owner}", f.number(), f.token)
            })
            .collect();
        progress(&format!(
            "PostgreSQL: every partition's fence holds the token of its last claim (partition: \
             token@owner {}); no message's meta record left after the drain",
            tokens.join(" ")
        ));
    }
    Ok(failures)
}

/// Every partition's fence, with its owner row.
fn read(database: &Database) -> Result<Vec<Fence>> {
    let out = database.psql(FENCES).context("reading the fences")?;
    out.lines().filter(|line| !line.is_empty()).map(parse_fence).collect()
}

fn parse_fence(line: &str) -> Result<Fence> {
    let fields: Vec<&str> = line.splitn(4, '|').collect();
    let [partition, token, owner_token, owner_node] = fields[..] else {
        anyhow::bail!("a fence line of {} fields: {line:?}", fields.len());
    };
    let hex = |text: &str| u64::from_str_radix(text, 16).with_context(|| format!("{line:?}"));
    let owner = match owner_token {
        "" => None,
        token => Some((hex(token)?, owner_node.to_owned())),
    };
    Ok(Fence { partition: partition.to_owned(), token: hex(token)?, owner })
}

/// The fences that do not hold their owner row's token, described.
fn mismatched(fences: &[Fence]) -> Vec<String> {
    let wrong =
        fences.iter().filter(|f| f.owner.as_ref().is_none_or(|(token, _)| *token != f.token));
    wrong
        .map(|f| match &f.owner {
            Some((token, node)) => format!(
                "partition {} (key {}): the fence holds token {} but the last claim, by {node}, \
                 has token {token}",
                f.number(),
                f.partition,
                f.token
            ),
            None => format!(
                "partition {} (key {}): a fence at token {} and no owner row",
                f.number(),
                f.partition,
                f.token
            ),
        })
        .collect()
}

/// Meta records still in PostgreSQL: `partition <n> (key …): <count> <tag>`.
fn leftover_messages(database: &Database) -> Result<Vec<String>> {
    let out = database.psql(LEFT).context("counting meta records")?;
    Ok(out
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            let key = fields.first().copied().unwrap_or_default();
            let partition = Fence { partition: key.to_owned(), token: 0, owner: None };
            let (tag, count) = (fields.get(1).unwrap_or(&"?"), fields.get(2).unwrap_or(&"?"));
            format!("partition {} (key {key}): {count} records of tag {tag}", partition.number())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_line_gives_its_token_and_owner() {
        let fence =
            parse_fence("0000000000000001000f|0000000000000012|0000000000000012|node-2").unwrap();
        assert_eq!(fence.number(), 15);
        assert_eq!((fence.token, fence.owner.clone()), (18, Some((18, "node-2".to_owned()))));
        assert!(mismatched(std::slice::from_ref(&fence)).is_empty());

        let stale = Fence { token: 17, ..fence };
        assert_eq!(
            mismatched(&[stale]),
            ["partition 15 (key 0000000000000001000f): the fence holds token 17 but the last \
              claim, by node-2, has token 18"]
        );
        let orphan = parse_fence("00000000000000010003|0000000000000009||").unwrap();
        assert_eq!(orphan.owner, None);
        assert_eq!(mismatched(&[orphan]).len(), 1);
        assert!(parse_fence("garbage").is_err());
    }
}
