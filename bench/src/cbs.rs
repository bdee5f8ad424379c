//! A minimal `$cbs` put-token (claims-based security, as Azure Service Bus does it): a sender and
//! a receiver on `$cbs`, one request carrying a SAS token, one response with `status-code` 202.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use base64::Engine;
use fe2o3_amqp::{
    session::SessionHandle,
    types::{
        definitions::{ReceiverSettleMode, SenderSettleMode},
        messaging::{ApplicationProperties, Body, Message, Outcome, Properties},
        primitives::{SimpleValue, Value},
    },
    Receiver, Sender,
};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The namespace policy whose key signs the token.
pub(crate) const KEY_NAME: &str = "RootManageSharedAccessKey";

/// How long the token is valid.
const TOKEN_LIFETIME_SECS: u64 = 3600;

/// The audience the token is for: the entity at `address` on `host` (`sb://host/address`).
pub(crate) fn audience(host: &str, address: &str) -> String {
    format!("sb://{host}/{}", address.trim_start_matches('/'))
}

/// Puts a SAS token for `audience`, signed with `key`, over a request/response link pair named
/// after `client` on `session`; succeeds when the broker answers `status-code` 202.
pub(crate) async fn put_token(
    session: &mut SessionHandle<()>,
    audience: &str,
    key: &str,
    client: &str,
) -> Result<()> {
    let reply_to = format!("{client}-cbs");
    let mut sender = Sender::builder()
        .name(format!("{reply_to}-sender"))
        .target("$cbs")
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .receiver_settle_mode(ReceiverSettleMode::First)
        .attach(session)
        .await
        .context("attaching the $cbs sender")?;
    let mut receiver = Receiver::builder()
        .name(format!("{reply_to}-receiver"))
        .source("$cbs")
        .target(reply_to.clone())
        .attach(session)
        .await
        .context("attaching the $cbs receiver")?;

    let expiry = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
        + TOKEN_LIFETIME_SECS;
    let request = Message::builder()
        .properties(
            Properties::builder()
                .message_id(format!("{client}-put-token"))
                .reply_to(reply_to)
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("operation", "put-token")
                .insert("type", "servicebus.windows.net:sastoken")
                .insert("name", audience)
                .build(),
        )
        .value(sas_token(audience, KEY_NAME, key, expiry))
        .build();
    match sender.send(request).await.context("sending the put-token request")? {
        Outcome::Accepted(_) => {}
        other => bail!("the put-token request was not accepted: {other:?}"),
    }
    let response =
        receiver.recv::<Body<Value>>().await.context("awaiting the put-token response")?;
    receiver.accept(&response).await.context("settling the put-token response")?;
    let properties = response.message().application_properties.as_ref();
    let status = properties.and_then(|p| p.get("status-code")).and_then(integer);
    let description = properties.and_then(|p| p.get("status-description"));
    if status != Some(202) {
        bail!("put-token answered status-code {status:?} ({description:?}), expected 202");
    }

    // The token stays with the connection; the links are not needed any more.
    if let Err((_, err)) = sender.detach().await {
        eprintln!("ironbus-bench: {client}: detaching the $cbs sender: {err}");
    }
    if let Err((_, err)) = receiver.detach().await {
        eprintln!("ironbus-bench: {client}: detaching the $cbs receiver: {err}");
    }
    Ok(())
}

/// `SharedAccessSignature sr=<enc(audience)>&sig=<sig>&se=<expiry>&skn=<key_name>`, where
/// `<sig>` is `enc(b64(hmac_sha256(key, enc(audience) + "\n" + expiry)))`: the string-to-sign
/// uses the encoded audience.
pub(crate) fn sas_token(audience: &str, key_name: &str, key: &str, expiry: u64) -> String {
    let resource = url_encode(audience);
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes())
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(format!("{resource}\n{expiry}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "SharedAccessSignature sr={resource}&sig={}&se={expiry}&skn={}",
        url_encode(&signature),
        url_encode(key_name)
    )
}

/// Percent-encodes everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`).
fn url_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// An AMQP integer of any width, as an i64 (status codes come typed differently by peers).
pub(crate) fn integer(value: &SimpleValue) -> Option<i64> {
    match *value {
        SimpleValue::Ubyte(v) => Some(v.into()),
        SimpleValue::Ushort(v) => Some(v.into()),
        SimpleValue::Uint(v) => Some(v.into()),
        SimpleValue::Ulong(v) => i64::try_from(v).ok(),
        SimpleValue::Byte(v) => Some(v.into()),
        SimpleValue::Short(v) => Some(v.into()),
        SimpleValue::Int(v) => Some(v.into()),
        SimpleValue::Long(v) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sas_token_matches_the_sdks_signing() {
        // Expected value from Python: quote_plus(audience), then
        // b64(hmac_sha256(key, sr + "\n" + se)), quote_plus'ed.
        assert_eq!(
            sas_token("sb://localhost/bench", KEY_NAME, "SAS_KEY_VALUE", 1_700_000_000),
            "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%2Fbench\
             &sig=KquLiMOjaJxChPwiMsxE%2BTo7d98aoVJXAipleKEkO7k%3D\
             &se=1700000000&skn=RootManageSharedAccessKey"
        );
    }

    #[test]
    fn audience_names_the_entity_on_the_host() {
        assert_eq!(audience("localhost", "bench"), "sb://localhost/bench");
        assert_eq!(audience("localhost", "/amq/queue/bench"), "sb://localhost/amq/queue/bench");
    }

    #[test]
    fn url_encode_keeps_only_unreserved_characters() {
        assert_eq!(url_encode("a-Z_0.~ /:+=é"), "a-Z_0.~%20%2F%3A%2B%3D%C3%A9");
    }

    #[test]
    fn status_code_is_read_from_any_integer_type() {
        assert_eq!(integer(&SimpleValue::Int(202)), Some(202));
        assert_eq!(integer(&SimpleValue::Ulong(202)), Some(202));
        assert_eq!(integer(&SimpleValue::String("202".into())), None);
    }
}
