//! The management client: list, get, create, update and delete entities over the ATOM API
//! (`GET|PUT|DELETE /<path>?api-version=2021-05`), each answer an [`Entry`] or an error that
//! carries the broker's status and text.

use hyper::Method;

use crate::atom::{self, Document, Entry, Kind, API_VERSION};
use crate::error::{CliError, ErrorKind, Result};
use crate::http::{HttpClient, Response};

/// Entries per page of a listing.
const PAGE: usize = 100;

/// The management API of one namespace.
#[derive(Debug, Clone)]
pub struct Management {
    http: HttpClient,
}

/// An entity's path: `queue`, `topic`, `topic/Subscriptions/sub`, `topic/Subscriptions/sub/Rules/rule`.
pub fn subscription_path(topic: &str, subscription: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}")
}

/// A rule's path.
pub fn rule_path(topic: &str, subscription: &str, rule: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}/Rules/{rule}")
}

impl Management {
    /// A client over `http`.
    pub fn new(http: HttpClient) -> Self {
        Management { http }
    }

    /// Every entity of `kind`: queues and topics of the namespace; subscriptions of the topic
    /// `parent`; rules of the subscription `parent` (`topic/Subscriptions/sub`). All pages.
    pub async fn list(&self, kind: Kind, parent: Option<&str>) -> Result<Vec<Entry>> {
        let collection = match (kind, parent) {
            (Kind::Queue, _) => "$Resources/Queues".to_owned(),
            (Kind::Topic, _) => "$Resources/Topics".to_owned(),
            (Kind::Subscription, Some(topic)) => format!("{}/Subscriptions", url_path(topic)),
            (Kind::Rule, Some(subscription)) => format!("{}/Rules", url_path(subscription)),
            (_, None) => {
                return Err(CliError::usage(format!("listing {}s needs a parent", kind.as_str())))
            }
        };
        let mut all = Vec::new();
        loop {
            let query =
                format!("/{collection}?$skip={}&$top={PAGE}&api-version={API_VERSION}", all.len());
            let response = self.http.request(Method::GET, &query, None, &[]).await?;
            let body = check(response, &format!("listing {}s", kind.as_str()))?;
            let (entries, next) = match atom::parse(&body)? {
                Document::Feed(entries, next) => (entries, next),
                Document::Entry(entry) => (vec![entry], false),
            };
            let page = entries.len();
            all.extend(entries);
            if !next && page < PAGE || page == 0 {
                return Ok(all);
            }
        }
    }

    /// The entity at `path`; a [`ErrorKind::NotFound`] error when it does not exist.
    pub async fn get(&self, path: &str) -> Result<Entry> {
        let query = format!("/{}?enrich=false&api-version={API_VERSION}", url_path(path));
        let response = self.http.request(Method::GET, &query, None, &[]).await?;
        let body = check(response, &format!("reading `{path}`"))?;
        match atom::parse(&body)? {
            Document::Entry(entry) => Ok(entry),
            // Service Bus answers a GET of a missing entity with an empty feed.
            Document::Feed(..) => {
                Err(CliError::new(ErrorKind::NotFound, format!("`{path}` does not exist")))
            }
        }
    }

    /// Creates (`update` false) or updates the entity at `path` with `entry`'s description;
    /// answers the description the broker stored.
    pub async fn put(&self, path: &str, entry: &Entry, update: bool) -> Result<Entry> {
        let query = format!("/{}?api-version={API_VERSION}", url_path(path));
        let headers: &[(&str, &str)] = if update { &[("If-Match", "*")] } else { &[] };
        let response =
            self.http.request(Method::PUT, &query, Some(entry.to_put_body()), headers).await?;
        let verb = if update { "updating" } else { "creating" };
        let body = check(response, &format!("{verb} {} `{path}`", entry.kind.as_str()))?;
        match atom::parse(&body)? {
            Document::Entry(entry) => Ok(entry),
            Document::Feed(..) => {
                Err(CliError::protocol(format!("{verb} `{path}` answered a feed")))
            }
        }
    }

    /// The namespace's name, from `$namespaceinfo` (`None` when the broker does not say).
    pub async fn namespace_name(&self) -> Result<Option<String>> {
        let query = format!("/$namespaceinfo?api-version={API_VERSION}");
        let response = self.http.request(Method::GET, &query, None, &[]).await?;
        let body = check(response, "reading the namespace's information")?;
        let Ok(doc) = roxmltree::Document::parse(&body) else { return Ok(None) };
        let name = doc
            .descendants()
            .find(|n| n.has_tag_name("NamespaceInfo"))
            .and_then(|info| info.children().find(|c| c.has_tag_name("Name")))
            .and_then(|n| n.text())
            .map(str::to_owned);
        Ok(name)
    }

    /// Deletes the entity at `path`.
    pub async fn delete(&self, path: &str) -> Result<()> {
        let query = format!("/{}?api-version={API_VERSION}", url_path(path));
        let response = self.http.request(Method::DELETE, &query, None, &[]).await?;
        check(response, &format!("deleting `{path}`"))?;
        Ok(())
    }
}

/// The body of a 2xx answer, else an error naming `what`, the status and the broker's text.
fn check(response: Response, what: &str) -> Result<String> {
    if (200..300).contains(&response.status) {
        return Ok(response.body);
    }
    let kind = match response.status {
        404 => ErrorKind::NotFound,
        _ => ErrorKind::Refused,
    };
    Err(CliError::new(
        kind,
        format!("{what}: HTTP {}: {}", response.status, error_text(&response.body)),
    ))
}

/// The `<Detail>` of a Service Bus error body, else the body itself (shortened).
pub fn error_text(body: &str) -> String {
    if let Ok(doc) = roxmltree::Document::parse(body) {
        if let Some(detail) =
            doc.descendants().find(|n| n.has_tag_name("Detail")).and_then(|n| n.text())
        {
            return detail.trim().to_owned();
        }
    }
    let text = body.trim();
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None if text.is_empty() => "(no details)".to_owned(),
        None => text.to_owned(),
    }
}

/// Percent-encodes each segment of a path (keeping `/` and `$`).
pub fn url_path(path: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const SEGMENT: &AsciiSet =
        &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b'$');
    path.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_the_details_of_a_service_bus_error() {
        let body = "<Error><Code>409</Code><Detail>The entity already exists. TrackingId:1</Detail></Error>";
        assert_eq!(error_text(body), "The entity already exists. TrackingId:1");
        assert_eq!(error_text("  plain  "), "plain");
        assert_eq!(error_text(""), "(no details)");
    }

    #[test]
    fn paths_are_encoded_per_segment() {
        assert_eq!(
            url_path("t/Subscriptions/a b/Rules/$Default"),
            "t/Subscriptions/a%20b/Rules/$Default"
        );
    }
}
