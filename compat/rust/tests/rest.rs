//! The REST data plane driven by `azure_messaging_servicebus` 0.21 (the legacy, REST-only Rust
//! crate), an independent client of ironbus's HTTP transport: send, peek-lock, renew, unlock,
//! complete, receive-and-delete.
//!
//! The crate hard-codes `https://{namespace}.servicebus.windows.net`, so the tests hand it an
//! `HttpClient` that rewrites each request's scheme, host and port to ironbus's plain HTTP
//! listener and delegates to azure_core's own client. The SAS tokens it signs still name
//! `https://{namespace}.servicebus.windows.net/...`: ironbus ignores the host of a token's
//! audience (http.md A.2), so they verify. The `Location` of a peek-lock answer is absolute and
//! names the host the request reached, so the follow-up calls go back through the same rewrite.
//!
//! `#[ignore]`d: they need a running broker (`cargo xtask compat rust` starts one and sets
//! `IRONBUS_HTTP_URL`, e.g. `http://127.0.0.1:5300`; the queue is `IRONBUS_RUST_REST_QUEUE`,
//! default `rust-rest`, empty at the start).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use azure_core::{HttpClient, Request, Response, StatusCode, Url};
use azure_messaging_servicebus::service_bus::{
    QueueClient, SendMessageOptions, SettableBrokerProperties,
};

const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "SAS_KEY_VALUE";

/// Sends every request to `target` instead of the host the crate put in its URL.
#[derive(Debug)]
struct Rewrite {
    target: Url,
    inner: Arc<dyn HttpClient>,
}

#[async_trait::async_trait]
impl HttpClient for Rewrite {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<Response> {
        let mut request = request.clone();
        let url = request.url_mut();
        url.set_scheme(self.target.scheme()).ok();
        url.set_host(self.target.host_str()).ok();
        url.set_port(self.target.port()).ok();
        self.inner.execute_request(&request).await
    }
}

fn client() -> Result<QueueClient> {
    let base = std::env::var("IRONBUS_HTTP_URL").context("IRONBUS_HTTP_URL is not set")?;
    let queue = std::env::var("IRONBUS_RUST_REST_QUEUE").unwrap_or_else(|_| "rust-rest".into());
    let http: Arc<dyn HttpClient> =
        Arc::new(Rewrite { target: Url::parse(&base)?, inner: azure_core::new_http_client() });
    Ok(QueueClient::new(http, "sbemulatorns", queue, KEY_NAME, KEY.to_owned())?)
}

#[tokio::test]
#[ignore = "needs a running ironbus: cargo xtask compat rust"]
async fn rest_send_peek_lock_renew_unlock_complete() -> Result<()> {
    let client = client()?;
    let options = SendMessageOptions {
        content_type: Some("text/plain".into()),
        broker_properties: Some(SettableBrokerProperties {
            message_id: Some("rest-1".into()),
            label: Some("greeting".into()),
            time_to_live: Some(Duration::from_secs(600)),
            ..Default::default()
        }),
        custom_properties: Some([("priority".to_owned(), "High".to_owned())].into()),
    };
    client.send_message("hello over REST", Some(options)).await?;

    let locked = client.peek_lock_message2(Some(Duration::from_secs(10))).await?;
    ensure!(*locked.status() == StatusCode::Created, "peek-lock answered {}", locked.status());
    ensure!(locked.body() == "hello over REST", "body {:?}", locked.body());
    let props = locked.broker_properties().context("no BrokerProperties")?;
    ensure!(props.message_id == "rest-1", "message id {}", props.message_id);
    ensure!(props.delivery_count == 1, "delivery count {}", props.delivery_count);
    ensure!(props.sequence_number >= 1);
    ensure!((props.time_to_live - 600.0).abs() < 1e-6, "ttl {}", props.time_to_live);
    ensure!(props.enqueued_time_utc.is_some());
    ensure!(props.locked_until_utc > time::OffsetDateTime::now_utc());
    locked.renew_message_lock().await?;
    locked.unlock_message().await?;

    // Unlocked: delivered again, one delivery later; then completed for good.
    let again = client.peek_lock_message2(Some(Duration::from_secs(10))).await?;
    let props = again.broker_properties().context("no BrokerProperties")?;
    ensure!(props.message_id == "rest-1" && props.delivery_count == 2, "{props:?}");
    again.delete_message().await?;
    ensure!(again.delete_message().await.is_err(), "a completed lock is gone (404)");

    // Receive-and-delete (the crate sends no timeout: the broker's default applies).
    client.send_message("second", None).await?;
    ensure!(client.receive_and_delete_message().await? == "second");
    let empty = client.peek_lock_message2(Some(Duration::from_secs(1))).await?;
    ensure!(*empty.status() == StatusCode::NoContent, "empty queue answered {}", empty.status());
    Ok(())
}
