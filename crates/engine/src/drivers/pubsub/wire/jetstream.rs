//! NATS JetStream for the `pubsub` system, over the NATS protocol of [`super::nats`]: a stream
//! per topic (created, or updated to the run's bound, through `$JS.API.STREAM.*`), a durable
//! push consumer per subscription (an earlier run's deleted first, then created at the stream's
//! end with `deliver_policy: new` and `ack_policy: explicit`; a shared subscription's consumers
//! are its deliver group), each publish sent with a reply subject so the stream answers it
//! (its PubAck), each delivery acknowledged by an empty publish to its reply subject.
//! The API's requests and answers are JSON (`serde_json`); only the opening uses them.
use serde::Deserialize;

/// JetStream's name for `topic`'s stream: stream names have no dots.
pub fn stream_name(topic: &str) -> String {
    topic.replace('.', "_")
}

/// The subject a publisher's PubAcks come back on: unique per run (`mark`) and publisher.
pub fn publisher_inbox(mark: [u8; 4], publisher: u32) -> String {
    format!("_INBOX.msgbench.{}.p{publisher}", hex(mark))
}

/// The subject a subscription's consumer delivers to: unique per run (`mark`).
pub fn deliver_subject(mark: [u8; 4], subscription: &str) -> String {
    format!("_DELIVER.msgbench.{}.{subscription}", hex(mark))
}

fn hex(mark: [u8; 4]) -> String {
    mark.iter().map(|b| format!("{b:02x}")).collect()
}

/// The durable consumer of `subscription` on `topic`'s stream.
pub fn durable_name(topic: &str, subscription: &str) -> String {
    format!("{}-{subscription}", stream_name(topic))
}

/// `$JS.API.STREAM.CREATE.<stream>` (or `UPDATE`) and its body: `topic` stored in files (the
/// server's default), at most `max_msgs` kept, the oldest removed first.
pub fn stream_request(topic: &str, max_msgs: u64, update: bool) -> (String, Vec<u8>) {
    let name = stream_name(topic);
    let body = serde_json::json!({
        "name": name,
        "subjects": [topic],
        "retention": "limits",
        "max_msgs": max_msgs,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "description": MSGBENCH_STREAM,
    });
    let verb = if update { "UPDATE" } else { "CREATE" };
    (
        format!("$JS.API.STREAM.{verb}.{name}"),
        body.to_string().into_bytes(),
    )
}

/// The description of the streams msgbench makes: the only ones it changes.
pub const MSGBENCH_STREAM: &str = "made by msgbench (pubsub)";

/// `$JS.API.STREAM.INFO.<stream>`.
pub fn stream_info_subject(topic: &str) -> String {
    format!("$JS.API.STREAM.INFO.{}", stream_name(topic))
}

/// A STREAM.INFO answer describes a stream msgbench made.
pub fn made_by_msgbench(info: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(info)
        .ok()
        .and_then(|v| {
            v["config"]["description"]
                .as_str()
                .map(|d| d == MSGBENCH_STREAM)
        })
        .unwrap_or(false)
}

/// `$JS.API.CONSUMER.DELETE.<stream>.<durable>`.
pub fn delete_consumer_subject(topic: &str, durable: &str) -> String {
    format!("$JS.API.CONSUMER.DELETE.{}.{durable}", stream_name(topic))
}

/// `$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>` and its body: a push consumer from the
/// stream's end, delivering to `deliver` (to one of `group`'s members when shared), every
/// message acknowledged, at most `max_ack_pending` unacknowledged.
pub fn consumer_request(
    topic: &str,
    durable: &str,
    deliver: &str,
    group: Option<&str>,
    max_ack_pending: u32,
) -> (String, Vec<u8>) {
    let stream = stream_name(topic);
    let mut config = serde_json::json!({
        "durable_name": durable,
        "deliver_subject": deliver,
        "deliver_policy": "new",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000u64,
        "max_deliver": -1,
        "max_ack_pending": max_ack_pending,
        "replay_policy": "instant",
    });
    if let Some(g) = group {
        config["deliver_group"] = g.into();
    }
    let body = serde_json::json!({ "stream_name": stream, "config": config });
    (
        format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}"),
        body.to_string().into_bytes(),
    )
}

/// An API answer's error: JetStream's own code (`err_code`) and its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// JetStream's error code (10058: a stream of that name with another configuration;
    /// 10014: no such consumer; …).
    pub code: u64,
    /// What it says.
    pub description: String,
}

#[derive(Deserialize)]
struct Answer {
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    code: u64,
    #[serde(default)]
    description: String,
}

/// Stream already in use with another configuration.
pub const STREAM_NAME_IN_USE: u64 = 10058;
/// No consumer of that name.
pub const CONSUMER_NOT_FOUND: u64 = 10014;

/// The error in an API answer (or a PubAck), if any; an answer that is not JSON is one.
pub fn api_error(payload: &[u8]) -> Option<ApiError> {
    match serde_json::from_slice::<Answer>(payload) {
        Ok(Answer { error: None }) => None,
        Ok(Answer { error: Some(e) }) => Some(ApiError {
            code: if e.err_code != 0 { e.err_code } else { e.code },
            description: e.description,
        }),
        Err(_) => Some(ApiError {
            code: 0,
            description: format!(
                "an answer that is not JetStream's: {:?}",
                String::from_utf8_lossy(&payload[..payload.len().min(80)])
            ),
        }),
    }
}

/// A PubAck's refusal, if it is one. A PubAck is small JSON (`{"stream":…,"seq":…}`): looked
/// for `"error"` before parsing, so the answer to every publish costs a scan, not a parse.
pub fn pub_ack_refusal(payload: &[u8]) -> Option<String> {
    if !payload.windows(7).any(|w| w == b"\"error\"") {
        return None;
    }
    api_error(payload).map(|e| format!("{} (JetStream error {})", e.description, e.code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_the_stream_without_dots_and_carry_the_bounds() {
        let (subject, body) = stream_request("msgbench.0", 1000, false);
        assert_eq!(subject, "$JS.API.STREAM.CREATE.msgbench_0");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["subjects"][0], "msgbench.0");
        assert_eq!(v["max_msgs"], 1000);
        let (subject, body) =
            consumer_request("msgbench.0", "msgbench_0-t0-s0", "_D.x", Some("g"), 64);
        assert_eq!(
            subject,
            "$JS.API.CONSUMER.DURABLE.CREATE.msgbench_0.msgbench_0-t0-s0"
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["config"]["deliver_group"], "g");
        assert_eq!(v["config"]["ack_policy"], "explicit");
        assert_eq!(v["config"]["max_ack_pending"], 64);
    }

    #[test]
    fn answers_tell_refusals_from_success() {
        assert_eq!(api_error(br#"{"type":"x","config":{}}"#), None);
        let e = api_error(br#"{"error":{"code":400,"err_code":10058,"description":"stream name already in use"}}"#).unwrap();
        assert_eq!(e.code, STREAM_NAME_IN_USE);
        assert!(api_error(b"nonsense").is_some());
        assert_eq!(pub_ack_refusal(br#"{"stream":"s","seq":7}"#), None);
        let r = pub_ack_refusal(
            br#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#,
        )
        .unwrap();
        assert!(r.contains("maximum messages exceeded"), "{r}");
    }
}
