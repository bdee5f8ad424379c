//! How an entity is shown: its [`EntityView`] (kind, path, counts, size, status, partitions and
//! every property) as a table row and as JSON (`schema/entity.json`).

use serde_json::{json, Map, Value};

use crate::atom::{Entry, Kind};

/// The message counts of a queue, topic or subscription.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Messages ready to be received.
    pub active: u64,
    /// Messages in the dead-letter queue.
    pub dead_letter: u64,
    /// Messages waiting for their scheduled time.
    pub scheduled: u64,
    /// Messages waiting to be forwarded.
    pub transfer: u64,
    /// Messages that could not be forwarded.
    pub transfer_dead_letter: u64,
}

impl Counts {
    /// The counts of an entry's `CountDetails`.
    pub fn of(entry: &Entry) -> Self {
        Counts {
            active: entry.count("ActiveMessageCount"),
            dead_letter: entry.count("DeadLetterMessageCount"),
            scheduled: entry.count("ScheduledMessageCount"),
            transfer: entry.count("TransferMessageCount"),
            transfer_dead_letter: entry.count("TransferDeadLetterMessageCount"),
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "active": self.active,
            "dead_letter": self.dead_letter,
            "scheduled": self.scheduled,
            "transfer": self.transfer,
            "transfer_dead_letter": self.transfer_dead_letter,
        })
    }
}

/// One entity as the CLI shows it.
#[derive(Debug, Clone)]
pub struct EntityView<'a> {
    /// Its full path (`topic/Subscriptions/sub` for a subscription).
    pub path: String,
    /// Its description.
    pub entry: &'a Entry,
}

impl<'a> EntityView<'a> {
    /// The view of `entry` at `path`.
    pub fn new(path: impl Into<String>, entry: &'a Entry) -> Self {
        EntityView { path: path.into(), entry }
    }

    /// Its partitions (1 when not partitioned; ironbus reports the count, others 16).
    pub fn partitions(&self) -> u64 {
        match (self.entry.flag("EnablePartitioning"), self.entry.number("PartitionCount")) {
            (false, _) => 1,
            (true, 0) => 16,
            (true, n) => n,
        }
    }

    /// The header of [`EntityView::row`].
    pub const HEADERS: [&'static str; 9] = [
        "KIND",
        "NAME",
        ">ACTIVE",
        ">DEAD",
        ">SCHEDULED",
        ">TRANSFER",
        ">SIZE",
        "STATUS",
        ">PARTITIONS",
    ];

    /// A table row: kind, path, counts, size, status, partitions.
    pub fn row(&self) -> Vec<String> {
        let counts = Counts::of(self.entry);
        let transfer = counts.transfer + counts.transfer_dead_letter;
        vec![
            self.entry.kind.as_str().to_owned(),
            self.path.clone(),
            counts.active.to_string(),
            counts.dead_letter.to_string(),
            counts.scheduled.to_string(),
            transfer.to_string(),
            human_size(self.entry.number("SizeInBytes")),
            self.entry.get("Status").unwrap_or("-").to_owned(),
            self.partitions().to_string(),
        ]
    }

    /// As JSON (`schema/entity.json`).
    pub fn json(&self) -> Value {
        json!({
            "kind": self.entry.kind.as_str(),
            "name": self.entry.name,
            "path": self.path,
            "status": self.entry.get("Status").unwrap_or("Active"),
            "partitioned": self.entry.flag("EnablePartitioning"),
            "partitions": self.partitions(),
            "size_bytes": self.entry.number("SizeInBytes"),
            "counts": Counts::of(self.entry).json(),
            "properties": properties(self.entry),
        })
    }

    /// The details of `show`: one `PROPERTY  VALUE` line per property, counts first.
    pub fn details(&self) -> String {
        let mut table = crate::output::Table::new(&["PROPERTY", "VALUE"]);
        let counts = Counts::of(self.entry);
        table.row(vec!["Path".into(), self.path.clone()]);
        table.row(vec!["Kind".into(), self.entry.kind.as_str().into()]);
        if self.entry.kind != Kind::Rule {
            for (name, value) in [
                ("ActiveMessageCount", counts.active),
                ("DeadLetterMessageCount", counts.dead_letter),
                ("ScheduledMessageCount", counts.scheduled),
                ("TransferMessageCount", counts.transfer),
                ("TransferDeadLetterMessageCount", counts.transfer_dead_letter),
            ] {
                table.row(vec![name.into(), value.to_string()]);
            }
        }
        for child in &self.entry.description.children {
            if child.name == "CountDetails" {
                continue;
            }
            table.row(vec![child.name.clone(), element_text(child)]);
        }
        table.render()
    }
}

/// An element's value for people: its text, `-` when nil, a compact form of its children.
fn element_text(element: &crate::atom::Element) -> String {
    if element.is_nil() {
        return "-".to_owned();
    }
    if element.children.is_empty() {
        return element.text.clone();
    }
    let kind = element.attribute(crate::atom::XSI_NS, "type");
    let inner: Vec<String> = element
        .children
        .iter()
        .filter(|c| !c.is_nil() && (!c.text.is_empty() || !c.children.is_empty()))
        .map(|c| format!("{}={}", c.name, element_text(c)))
        .collect();
    match kind {
        Some(kind) => format!("{kind}({})", inner.join(", ")),
        None => format!("({})", inner.join(", ")),
    }
}

/// A description's text elements as JSON values: `true`/`false` as booleans, integers as
/// numbers, the rest as strings; nil and structured elements left out.
pub fn properties(entry: &Entry) -> Map<String, Value> {
    let mut map = Map::new();
    for child in &entry.description.children {
        if !child.children.is_empty() || child.is_nil() {
            continue;
        }
        map.insert(child.name.clone(), typed(&child.text));
    }
    map
}

/// Text as the JSON value it looks like.
pub fn typed(text: &str) -> Value {
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        t => match t.parse::<i64>() {
            Ok(n) if !t.starts_with('+') && (t == "0" || !t.starts_with('0')) => Value::from(n),
            _ => Value::String(t.to_owned()),
        },
    }
}

/// Bytes for people: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn text_is_typed_as_it_looks() {
        assert_eq!(typed("true"), Value::Bool(true));
        assert_eq!(typed("10"), Value::from(10));
        assert_eq!(typed("007"), Value::from("007"));
        assert_eq!(typed("PT1M"), Value::from("PT1M"));
    }
}
