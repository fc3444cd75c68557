//! JSON-RPC 2.0 responses, as the clients read them: the id, whether a `result` or an `error`
//! came, and an error's code and message in one line. Shared by `ws-rpc` (over WebSocket) and
//! `http` with `json_rpc` (over HTTP).
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The parts of a response the client reads. `result` and `error` are "present or not":
/// `"result": null` is a valid result (a receipt not mined yet).
#[derive(Deserialize)]
struct Reply {
    id: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// A JSON-RPC response's id and whether it carries a `result` (else an `error`); `None` for
/// anything else (no numeric id, both or neither member, not JSON).
pub fn parse_reply(payload: &[u8]) -> Option<(u64, bool)> {
    match serde_json::from_slice::<Reply>(payload) {
        Ok(Reply {
            id: Some(id),
            result,
            error,
        }) if result != error => Some((id, result)),
        _ => None,
    }
}

/// A response with its `result`'s JSON text (a streamed answer's message, or its end).
#[derive(Deserialize)]
struct StreamReply<'a> {
    id: Option<u64>,
    #[serde(borrow, default, deserialize_with = "raw")]
    result: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// A response's id and its `result` as JSON text (`None`: an `error`); `None` for anything
/// else, as [`parse_reply`].
pub fn parse_stream_reply(payload: &[u8]) -> Option<(u64, Option<&str>)> {
    match serde_json::from_slice::<StreamReply>(payload) {
        Ok(StreamReply {
            id: Some(id),
            result,
            error,
        }) if result.is_some() != error => Some((id, result.map(RawValue::get))),
        _ => None,
    }
}

/// `"result": null` is a result too (`Option<&RawValue>` alone would read it as absent).
fn raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// An error reply's `error` member as one line: `JSON-RPC error -32601 "method not found"`
/// (only what is there: a missing code or message is left out).
pub fn error_message(payload: &[u8], text: &mut String) {
    use std::fmt::Write;
    #[derive(Deserialize)]
    struct WithError<'a> {
        #[serde(borrow)]
        error: Option<ErrorObject<'a>>,
    }
    #[derive(Deserialize)]
    struct ErrorObject<'a> {
        code: Option<i64>,
        #[serde(borrow)]
        message: Option<std::borrow::Cow<'a, str>>,
    }
    text.clear();
    text.push_str("JSON-RPC error");
    if let Ok(WithError {
        error: Some(ErrorObject { code, message }),
    }) = serde_json::from_slice::<WithError>(payload)
    {
        if let Some(code) = code {
            let _ = write!(text, " {code}");
        }
        if let Some(message) = message {
            let _ = write!(text, " {message:?}");
        }
    }
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_reply_gives_its_result_as_json_text() {
        let p = |t: &str| parse_stream_reply(t.as_bytes()).map(|(id, r)| (id, r.map(String::from)));
        assert_eq!(
            p(r#"{"jsonrpc":"2.0","id":3,"result":"tok"}"#),
            Some((3, Some("\"tok\"".into())))
        );
        assert_eq!(
            p(r#"{"id":3, "result" : null}"#),
            Some((3, Some("null".into())))
        );
        assert_eq!(
            p(r#"{"id":4,"result":{"a":[1, 2]}}"#),
            Some((4, Some(r#"{"a":[1, 2]}"#.into())))
        );
        assert_eq!(p(r#"{"id":5,"error":{"code":1}}"#), Some((5, None)));
        assert_eq!(p(r#"{"id":5,"error":{},"result":1}"#), None);
        assert_eq!(p(r#"{"id":5}"#), None);
        assert_eq!(p("not json"), None);
    }

    #[test]
    fn replies_are_results_or_errors_with_an_id() {
        let parse = |text: &str| {
            let r: Reply = serde_json::from_str(text).unwrap();
            (r.id, r.result, r.error)
        };
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":7,"result":{"a":[1]}}"#),
            (Some(7), true, false)
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":9,"result":null}"#),
            (Some(9), true, false),
            "a null result is a result"
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"x"}}"#),
            (Some(8), false, true)
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":8}"#),
            (Some(8), false, false)
        );
    }
}
