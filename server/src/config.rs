//! Entities declared at start-up in the Microsoft Service Bus emulator's `config.json` format:
//! `UserConfig → Namespaces → Queues / Topics`, each queue with a `Name` and `Properties`.
//!
//! What ironbus cannot do yet (topics, sessions) is refused with a clear message rather than
//! ignored. Loading is idempotent: an entity that already exists keeps its messages; missing
//! ones are created.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use ironbus_core::{Broker, BrokerError, EntityStatus, QueueDescription};
use serde_json::Value;

/// A queue the file declares.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredQueue {
    pub name: String,
    pub description: QueueDescription,
}

/// Parses the file's text into the queues it declares.
pub fn parse(text: &str) -> Result<Vec<DeclaredQueue>> {
    let root: Value = serde_json::from_str(text).context("config is not valid JSON")?;
    let namespaces = root
        .get("UserConfig")
        .and_then(|u| u.get("Namespaces"))
        .and_then(Value::as_array)
        .context("config needs UserConfig.Namespaces (the emulator's config.json format)")?;
    let mut queues = Vec::new();
    for namespace in namespaces {
        if let Some(topics) = namespace.get("Topics").and_then(Value::as_array) {
            if !topics.is_empty() {
                bail!("config declares topics; ironbus does not support topics yet (only queues)");
            }
        }
        let Some(list) = namespace.get("Queues").and_then(Value::as_array) else { continue };
        for queue in list {
            let name = queue
                .get("Name")
                .and_then(Value::as_str)
                .context("every queue needs a Name")?
                .to_owned();
            let description = queue_description(queue.get("Properties"))
                .with_context(|| format!("queue {name}"))?;
            queues.push(DeclaredQueue { name, description });
        }
    }
    Ok(queues)
}

/// The name of the (first) namespace the file declares, which `$namespaceinfo` reports.
pub fn namespace_name(text: &str) -> Option<String> {
    let root: Value = serde_json::from_str(text).ok()?;
    let name = root.get("UserConfig")?.get("Namespaces")?.get(0)?.get("Name")?.as_str()?;
    Some(name.to_owned()).filter(|n| !n.is_empty())
}

fn queue_description(properties: Option<&Value>) -> Result<QueueDescription> {
    let mut d = QueueDescription::default();
    let Some(props) = properties else { return Ok(d) };
    let Some(props) = props.as_object() else { bail!("Properties must be an object") };
    for (key, value) in props {
        let text = || value.as_str().with_context(|| format!("{key} must be a string"));
        let flag = || value.as_bool().with_context(|| format!("{key} must be true or false"));
        let number = || value.as_u64().with_context(|| format!("{key} must be a whole number"));
        let target =
            || -> Result<Option<String>> { Ok(Some(text()?.to_owned()).filter(|s| !s.is_empty())) };
        match key.as_str() {
            "DeadLetteringOnMessageExpiration" => d.dead_lettering_on_message_expiration = flag()?,
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = iso_duration(text()?)?,
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = iso_duration(text()?)?
            }
            "ForwardDeadLetteredMessagesTo" => d.forward_dead_lettered_messages_to = target()?,
            "ForwardTo" => d.forward_to = target()?,
            "LockDuration" => d.lock_duration = iso_duration(text()?)?,
            "MaxDeliveryCount" => d.max_delivery_count = number()?.try_into()?,
            "RequiresDuplicateDetection" => d.requires_duplicate_detection = flag()?,
            "RequiresSession" => {
                if flag()? {
                    bail!("RequiresSession: sessions are not supported by ironbus yet");
                }
            }
            "EnablePartitioning" => d.enable_partitioning = flag()?,
            "PartitionCount" => d.partition_count = number()?.try_into()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = number()?,
            "MaxMessageSizeInKilobytes" => d.max_message_size_in_kilobytes = number()?,
            "EnableBatchedOperations" => d.enable_batched_operations = flag()?,
            "Status" => {
                d.status = match text()? {
                    "Active" => EntityStatus::Active,
                    "Disabled" => EntityStatus::Disabled,
                    "SendDisabled" => EntityStatus::SendDisabled,
                    "ReceiveDisabled" => EntityStatus::ReceiveDisabled,
                    other => bail!("Status {other:?} is not one of Active, Disabled, SendDisabled, ReceiveDisabled"),
                }
            }
            "UserMetadata" => d.user_metadata = Some(text()?.to_owned()),
            other => bail!("unknown queue property {other}"),
        }
    }
    Ok(d)
}

/// Parses an ISO 8601 duration as .NET writes time spans: `PT1M`, `PT20S`, `P14D`, `PT0.5S`,
/// `P10675199DT2H48M5.4775807S`.
pub fn iso_duration(text: &str) -> Result<Duration> {
    let invalid = || anyhow::anyhow!("{text:?} is not an ISO 8601 duration such as PT1M");
    let rest = text.strip_prefix('P').ok_or_else(invalid)?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut millis: f64 = 0.0;
    let mut parse = |part: &str, units: &[(char, f64)]| -> Result<()> {
        let mut number = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let unit = units.iter().find(|(u, _)| *u == c).ok_or_else(invalid)?.1;
            let value: f64 = number.parse().map_err(|_| invalid())?;
            millis += value * unit;
            number.clear();
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(invalid())
        }
    };
    parse(date, &[('D', 86_400_000.0), ('W', 7.0 * 86_400_000.0)])?;
    parse(time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1000.0)])?;
    if date.is_empty() && time.is_empty() {
        return Err(invalid());
    }
    Ok(Duration::from_millis(millis.floor() as u64))
}

/// Creates the declared queues that do not exist yet. Existing ones are left as they are
/// (their messages kept). Returns how many were created.
pub async fn apply(broker: &Broker, queues: &[DeclaredQueue]) -> Result<usize> {
    let mut created = 0;
    // Forward targets must exist first: create queues without forwarding before the others.
    let mut ordered: Vec<&DeclaredQueue> = queues.iter().collect();
    ordered.sort_by_key(|q| {
        q.description.forward_to.is_some()
            || q.description.forward_dead_lettered_messages_to.is_some()
    });
    for queue in ordered {
        match broker.create_queue(&queue.name, queue.description.clone()).await {
            Ok(_) => created += 1,
            Err(BrokerError::EntityAlreadyExists { .. }) => {}
            Err(e) => return Err(e).with_context(|| format!("creating queue {}", queue.name)),
        }
    }
    Ok(created)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_namespace_name_is_the_first_namespaces() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": []}]}}"#;
        assert_eq!(namespace_name(text).as_deref(), Some("sbemulatorns"));
        assert_eq!(namespace_name(r#"{"UserConfig": {"Namespaces": []}}"#), None);
        assert_eq!(namespace_name(r#"{"UserConfig": {"Namespaces": [{"Name": ""}]}}"#), None);
        assert_eq!(namespace_name("not json"), None);
    }

    use super::*;

    #[test]
    fn durations_parse_like_dotnet_time_spans() {
        let cases = [
            ("PT1M", 60_000),
            ("PT20S", 20_000),
            ("PT0.5S", 500),
            ("P14D", 14 * 86_400_000),
            ("PT1H30M", 5_400_000),
            ("P1DT1S", 86_401_000),
            ("P10675199DT2H48M5.4775807S", 922_337_203_685_477),
        ];
        for (text, ms) in cases {
            assert_eq!(iso_duration(text).unwrap(), Duration::from_millis(ms), "{text}");
        }
        for bad in ["", "P", "1M", "PTXS", "PT5", "PT5Q"] {
            assert!(iso_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn emulator_config_declares_queues() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
            {"Name": "q1", "Properties": {"DeadLetteringOnMessageExpiration": true,
              "DefaultMessageTimeToLive": "PT1H", "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "LockDuration": "PT5S",
              "MaxDeliveryCount": 3, "RequiresDuplicateDetection": true, "RequiresSession": false,
              "EnablePartitioning": true, "PartitionCount": 4}},
            {"Name": "q2"}], "Topics": []}], "Logging": {"Type": "File"}}}"#;
        let queues = parse(text).unwrap();
        assert_eq!(queues.len(), 2);
        let d = &queues[0].description;
        assert!(d.dead_lettering_on_message_expiration && d.requires_duplicate_detection);
        assert_eq!(d.lock_duration, Duration::from_secs(5));
        assert_eq!(d.max_delivery_count, 3);
        assert_eq!(d.partitions(), 4);
        assert_eq!(d.forward_to, None);
        assert_eq!(queues[1].description, QueueDescription::default());
    }

    #[test]
    fn unsupported_parts_are_refused_clearly() {
        let topics = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [], "Topics": [{"Name": "t"}]}]}}"#;
        assert!(parse(topics).unwrap_err().to_string().contains("topics"));
        let sessions = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"RequiresSession": true}}]}]}}"#;
        assert!(format!("{:#}", parse(sessions).unwrap_err()).contains("sessions"));
        let unknown = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"Bogus": 1}}]}]}}"#;
        assert!(format!("{:#}", parse(unknown).unwrap_err()).contains("Bogus"));
        assert!(parse("{}").is_err());
    }
}
