//! `session list|show|set-state`: the sessions of a session-enabled queue or subscription, over
//! its `$management` node (`com.microsoft:get-message-sessions`, `get-session-state`,
//! `set-session-state`; `schema/sessions.json`, `schema/session.json`). Reading or setting a
//! state needs the session's lock, so `show` and `set-state` accept the session with a
//! receiver first (and release it when done): they fail while another receiver holds it.

use base64::Engine;
use fe2o3_amqp::types::primitives::{Binary, Timestamp, Value};
use serde_json::{json, Value as Json};

use crate::amqp::{map_get, AmqpClient, ReceiveMode, SessionFilter};
use crate::args::SessionAction;
use crate::commands::messages::peek_messages;
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::output::{self, Table};
use crate::Target;

/// Sessions asked for per request.
const PAGE: i32 = 100;

/// DateTime.MaxValue in Unix milliseconds, as the Python SDK sends it: "any time", which lists
/// every session with messages or a state.
const ANY_TIME_MILLIS: i64 = 253_402_300_800_000;

/// Runs `session <action>`.
pub(crate) async fn run(target: &Target, action: SessionAction) -> Result<()> {
    match action {
        SessionAction::List { entity } => list(target, &entity).await,
        SessionAction::Show { entity, id } => show(target, &entity, &id).await,
        SessionAction::SetState { entity, id, state, file, clear } => {
            let bytes = match (state, file, clear) {
                (Some(text), None, false) => Some(text.into_bytes()),
                (None, Some(path), false) => Some(
                    std::fs::read(&path)
                        .context(ErrorKind::Io, || format!("reading {}", path.display()))?,
                ),
                (None, None, true) => None,
                _ => {
                    return Err(CliError::usage(
                        "give the state as an argument, with --file, or --clear",
                    ))
                }
            };
            set_state(target, &entity, &id, bytes).await
        }
    }
}

async fn list(target: &Target, entity: &str) -> Result<()> {
    let mut client = target.amqp().await?;
    let mut node = client.management(entity).await?;
    let mut ids: Vec<String> = Vec::new();
    loop {
        let body = vec![
            ("skip", Value::Int(i32::try_from(ids.len()).unwrap_or(i32::MAX))),
            ("top", Value::Int(PAGE)),
            ("last-updated-time", Value::Timestamp(Timestamp::from_milliseconds(ANY_TIME_MILLIS))),
        ];
        let answer = node.call("com.microsoft:get-message-sessions", body).await?;
        let page: Vec<String> = match map_get(&answer, "sessions-ids") {
            Some(Value::Array(a)) => a.0.iter().filter_map(string).collect(),
            Some(Value::List(l)) => l.iter().filter_map(string).collect(),
            _ => Vec::new(),
        };
        let done = page.len() < PAGE as usize;
        ids.extend(page);
        if done {
            break;
        }
    }
    client.close().await;
    let json = json!({ "entity": entity, "sessions": ids });
    output::emit(target.format, &json, || {
        let mut table = Table::new(&["SESSION"]);
        for id in &ids {
            table.row(vec![id.clone()]);
        }
        if table.is_empty() {
            "no sessions\n".to_owned()
        } else {
            table.render()
        }
    });
    Ok(())
}

fn string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Accepts session `id` of `entity` on `client` (locks it) and answers the receiver to close.
async fn accept(client: &mut AmqpClient, entity: &str, id: &str) -> Result<fe2o3_amqp::Receiver> {
    client.receiver(entity, ReceiveMode::PeekLock, SessionFilter::Named(id)).await.map_err(|e| {
        CliError::new(
            e.kind(),
            format!("accepting session `{id}` of `{entity}` (is another receiver holding it?)"),
        )
        .with_source(e)
    })
}

async fn show(target: &Target, entity: &str, id: &str) -> Result<()> {
    let mut client = target.amqp().await?;
    let receiver = accept(&mut client, entity, id).await?;
    let mut node = client.management(entity).await?;
    let answer = node
        .call("com.microsoft:get-session-state", vec![("session-id", Value::String(id.to_owned()))])
        .await?;
    let state = match map_get(&answer, "session-state") {
        Some(Value::Binary(b)) => Some(b.as_slice().to_vec()),
        _ => None,
    };
    let messages = peek_messages(&mut client, entity, 0, 1000, Some(id)).await?.len();
    let _ = receiver.close().await;
    client.close().await;
    let (text, encoding) = match &state {
        None => (Json::Null, Json::Null),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(t) => (json!(t), json!("utf-8")),
            Err(_) => {
                (json!(base64::engine::general_purpose::STANDARD.encode(bytes)), json!("base64"))
            }
        },
    };
    let json = json!({
        "entity": entity,
        "session_id": id,
        "state": text,
        "state_encoding": encoding,
        "state_bytes": state.as_ref().map(Vec::len),
        "messages": messages,
    });
    output::emit(target.format, &json, || {
        let mut table = Table::new(&["PROPERTY", "VALUE"]);
        table.row(vec!["Session".into(), id.to_owned()]);
        table.row(vec!["Messages".into(), messages.to_string()]);
        let shown = match (&json["state"], &json["state_encoding"]) {
            (Json::Null, _) => "(none)".to_owned(),
            (Json::String(s), e) if e == "base64" => format!("base64:{s}"),
            (Json::String(s), _) => s.clone(),
            (other, _) => other.to_string(),
        };
        table.row(vec!["State".into(), shown]);
        table.render()
    });
    Ok(())
}

async fn set_state(target: &Target, entity: &str, id: &str, state: Option<Vec<u8>>) -> Result<()> {
    let mut client = target.amqp().await?;
    let receiver = accept(&mut client, entity, id).await?;
    let mut node = client.management(entity).await?;
    let value = state.as_ref().map_or(Value::Null, |b| Value::Binary(Binary::from(b.clone())));
    node.call(
        "com.microsoft:set-session-state",
        vec![("session-id", Value::String(id.to_owned())), ("session-state", value)],
    )
    .await?;
    let _ = receiver.close().await;
    client.close().await;
    let json =
        json!({ "entity": entity, "session_id": id, "state_bytes": state.as_ref().map(Vec::len) });
    output::emit(target.format, &json, || match &state {
        Some(b) => format!("set the state of session {id} of {entity} ({} bytes)\n", b.len()),
        None => format!("cleared the state of session {id} of {entity}\n"),
    });
    Ok(())
}
