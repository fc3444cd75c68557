//! The `[ticks.sse]` section: a Server-Sent Events feed (`text/event-stream`) read by the tick
//! clients when `ticks.address` is an `http://` or `https://` URL without `[ticks.grpc]` — the
//! request each client makes (HTTP/1.1 or HTTP/2, its headers), which events count, and whether
//! a reconnection asks the server to resume after the last event it read (`Last-Event-ID`).
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `[ticks.sse]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SseSpec {
    /// `"1.1"` or `"2"` (HTTP/2: prior knowledge on `http://`, ALPN `h2` on `https://`).
    pub version: SseVersion,
    /// Headers of each client's request (`Authorization`, a cookie); `Accept:
    /// text/event-stream` and, on a reconnection, `Last-Event-ID` are msgbench's.
    pub headers: BTreeMap<String, String>,
    /// Only events of this type (their `event:` field; `message` when they have none) count;
    /// omitted: every event with data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// A reconnection (`ticks.on_close = "reconnect"`) sends the last event id read as
    /// `Last-Event-ID`, and the client's sequence goes on across it: what the server does not
    /// replay shows as a gap. `false`: each connection starts a sequence of its own.
    pub resume: bool,
}

impl Default for SseSpec {
    fn default() -> Self {
        SseSpec {
            version: SseVersion::Http1,
            headers: BTreeMap::new(),
            event: None,
            resume: true,
        }
    }
}

/// The HTTP version of an event stream's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum SseVersion {
    /// HTTP/1.1: one connection per stream.
    #[serde(rename = "1.1")]
    Http1,
    /// HTTP/2: one connection per client, its stream the request's.
    #[serde(rename = "2")]
    Http2,
}

/// A validated event-stream request.
#[derive(Debug, Clone, PartialEq)]
pub struct SseStream {
    /// `host:port` to connect to.
    pub address: String,
    /// The `Host` header / `:authority`.
    pub authority: String,
    /// The request target (`/events?x=1`).
    pub target: String,
    /// TLS (`https://`): the name the certificate must carry.
    pub server_name: Option<String>,
    /// HTTP version.
    pub version: SseVersion,
    /// Request headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The event type that counts (`None`: every one).
    pub event: Option<String>,
    /// Reconnections resume after the last event id.
    pub resume: bool,
}

/// Headers msgbench writes itself, or that make no sense on a stream's request.
const OWN_HEADERS: [&str; 9] = [
    "host",
    "accept",
    "last-event-id",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "keep-alive",
    "te",
];

impl SseSpec {
    /// The request each client makes to `address` (`http[s]://host[:port]/path`).
    pub(crate) fn validate(
        &self,
        address: &str,
        invalid: &Invalid,
    ) -> Result<SseStream, ScenarioError> {
        let url = crate::url::parse_url(address).map_err(|(why, fix)| {
            invalid(
                "ticks.address",
                format!("is \"{address}\", which {why}"),
                fix,
            )
        })?;
        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid(
                    "ticks.sse.headers",
                    format!("has the header {name:?}"),
                    "header names are tokens (Authorization) and values have no line breaks",
                ));
            }
            if OWN_HEADERS.contains(&lower.as_str()) {
                return Err(invalid(
                    "ticks.sse.headers",
                    format!("sets {name}, which msgbench writes itself"),
                    "leave it out: Host, Accept: text/event-stream and Last-Event-ID are msgbench's",
                ));
            }
            headers.push((lower, value.clone()));
        }
        if self
            .event
            .as_deref()
            .is_some_and(|e| e.is_empty() || e.contains(['\r', '\n']))
        {
            return Err(invalid(
                "ticks.sse.event",
                format!("is {:?}", self.event.as_deref().unwrap_or_default()),
                "name an event type, e.g. event = \"trade\" (omit it to count every event)",
            ));
        }
        Ok(SseStream {
            address: url.address,
            authority: url.authority,
            target: url.target,
            server_name: url.tls.then_some(url.host),
            version: self.version,
            headers,
            event: self.event.clone(),
            resume: self.resume,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(field: &str, problem: String, fix: &str) -> ScenarioError {
        ScenarioError::Invalid {
            source_name: "t".into(),
            field: field.into(),
            problem,
            fix: fix.into(),
        }
    }

    #[test]
    fn a_stream_request_is_read_from_the_address_and_its_headers_checked() {
        let mut spec = SseSpec::default();
        spec.headers
            .insert("Authorization".into(), "Bearer x".into());
        let s = spec
            .validate("https://feed.example.com/v1/events?s=btc", &invalid)
            .unwrap();
        assert_eq!(s.address, "feed.example.com:443");
        assert_eq!(s.target, "/v1/events?s=btc");
        assert_eq!(s.server_name.as_deref(), Some("feed.example.com"));
        assert_eq!(s.headers, [("authorization".into(), "Bearer x".into())]);
        spec.headers.insert("Last-Event-ID".into(), "7".into());
        let e = spec
            .validate("http://127.0.0.1:8080/", &invalid)
            .unwrap_err();
        assert!(e.to_string().contains("writes itself"), "{e}");
        let e = SseSpec::default()
            .validate("ftp://x/", &invalid)
            .unwrap_err();
        assert!(e.to_string().contains("ticks.address"), "{e}");
    }
}
