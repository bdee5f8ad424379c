//! `purge`: deletes every message of a queue or subscription (or of its dead-letter queue) with
//! the `$management` operation `com.microsoft:batch-delete-messages`, 4,000 at a time, until
//! a batch deletes none (`schema/purge.json`). Asks first on a terminal; refuses without
//! `--yes` when it cannot ask.

use std::io::{BufRead, IsTerminal, Write};

use fe2o3_amqp::types::primitives::{Timestamp, Value};
use serde_json::json;

use crate::amqp::{map_get, value_integer};
use crate::args::{Purge, SubQueue};
use crate::commands::messages::{cancel, peek_messages, sub_queue_path};
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::message::MessageView;
use crate::output;
use crate::time::now_millis;
use crate::Target;

/// Most messages one batch delete takes (Service Bus's limit).
pub(crate) const BATCH: i32 = 4000;

/// Asks the operator to confirm `question` on the terminal, or refuses when stdin is not one.
pub(crate) fn confirm(question: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            ErrorKind::Declined,
            format!("{question}: refusing without --yes, since stdin is not a terminal to ask on"),
        ));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context(ErrorKind::Io, || "reading the answer".to_owned())?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::new(ErrorKind::Declined, "not confirmed; nothing was deleted")),
    }
}

/// Runs `purge`.
pub(crate) async fn run(target: &Target, args: &Purge) -> Result<()> {
    let path =
        sub_queue_path(&args.entity, SubQueue { dead_letter: args.dead_letter, transfer: false });
    if !args.yes {
        confirm(&format!("delete every message of `{path}`?"))?;
    }
    if args.scheduled {
        return purge_scheduled(target, &args.entity).await;
    }
    // Messages enqueued after the purge started are left alone.
    let cutoff = now_millis();
    let mut client = target.amqp().await?;
    let mut node = client.management(&path).await?;
    let in_place = output::stderr_is_terminal();
    let mut total: i64 = 0;
    loop {
        let body = vec![
            ("message-count", Value::Int(BATCH)),
            ("enqueued-time-utc", Value::Timestamp(Timestamp::from_milliseconds(cutoff))),
        ];
        let answer = node.call("com.microsoft:batch-delete-messages", body).await?;
        let deleted = map_get(&answer, "message-count")
            .and_then(value_integer)
            .ok_or_else(|| CliError::protocol("the batch delete's answer has no message-count"))?;
        if deleted == 0 {
            break;
        }
        total += deleted;
        if target.format == output::Format::Table {
            if in_place {
                eprint!("\rdeleted {total} messages");
            } else {
                output::note(&format!("deleted {total} messages"));
            }
        }
    }
    if in_place && total > 0 && target.format == output::Format::Table {
        eprintln!();
    }
    client.close().await;
    let json = json!({ "entity": path, "deleted": total });
    output::emit(target.format, &json, || format!("purged {path}: {total} messages deleted\n"));
    Ok(())
}

/// `purge --scheduled`: peeks every message, cancels the scheduled ones.
async fn purge_scheduled(target: &Target, entity: &str) -> Result<()> {
    let mut client = target.amqp().await?;
    let messages = peek_messages(&mut client, entity, 0, u32::MAX, None).await?;
    let scheduled: Vec<i64> = messages
        .iter()
        .map(MessageView::new)
        .filter(|v| v.json["state"] == "scheduled")
        .filter_map(|v| v.json["sequence_number"].as_i64())
        .collect();
    cancel(&mut client, entity, &scheduled).await?;
    client.close().await;
    let json = json!({ "entity": entity, "deleted": scheduled.len() });
    output::emit(target.format, &json, || {
        format!("purged {entity}: {} scheduled messages cancelled\n", scheduled.len())
    });
    Ok(())
}
