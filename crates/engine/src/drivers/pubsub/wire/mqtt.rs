//! The client side of MQTT 3.1.1 and 5 that the `pubsub` driver needs: CONNECT, SUBSCRIBE,
//! PUBLISH at QoS 0 and 1 and PUBACK written; CONNACK, SUBACK, PUBLISH, PUBACK, PINGRESP and
//! (5) DISCONNECT read. MQTT 5 adds a properties block to CONNECT, CONNACK, SUBSCRIBE, SUBACK,
//! PUBLISH and PUBACK: msgbench sends none, and skips those it is sent.
//! Hand-written rather than taken from `rumqttc`: that client runs its own event loop and
//! hands each incoming publish over as an owned `Publish` (topic `String`, payload `Bytes`),
//! where the subscriber reads 24 bytes of each payload in place; the packets the driver needs
//! are a few bytes of framing each.

/// Largest packet accepted (MQTT allows 256 MiB; msgbench publishes at most 1 MiB).
pub const MAX_PACKET: usize = 64 << 20;

/// One packet from the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    /// CONNACK with its return code (0: accepted).
    ConnAck(u8),
    /// SUBACK with the granted QoS (0x80: refused).
    SubAck(u8),
    /// PUBLISH: the payload, and the packet id to acknowledge (QoS 1).
    Publish {
        /// The message.
        payload: &'a [u8],
        /// Its packet id when it must be acknowledged with a PUBACK.
        ack: Option<u16>,
    },
    /// PUBACK of one of our QoS 1 publishes.
    PubAck(u16),
    /// PINGRESP.
    PingResp,
    /// MQTT 5: a PUBACK refusing the publish (its reason code, 0x80 or above).
    PubRefused(u8),
    /// MQTT 5: the broker ends the connection (its reason code).
    Disconnect(u8),
}

/// Bytes that are not MQTT from a broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MqttError {
    /// A remaining length longer than four bytes or past the limit.
    #[error("an MQTT packet length that is malformed or over {MAX_PACKET} bytes")]
    Length,
    /// A packet type a broker does not send to a client, or a malformed one.
    #[error("an unexpected MQTT packet (type {0})")]
    Unexpected(u8),
    /// A PUBLISH at QoS 2 (msgbench subscribes at 0 or 1) or with a broken topic.
    #[error("a malformed MQTT PUBLISH: {0}")]
    BadPublish(&'static str),
}

/// A variable byte integer at the start of `buf`: its value and its bytes.
fn varint(buf: &[u8]) -> Option<(usize, usize)> {
    let mut n = 0usize;
    for (i, &b) in buf.iter().take(4).enumerate() {
        n |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

/// The packet at the start of `buf` and the bytes it took (`v5`: MQTT 5's packets, with
/// properties); `Ok(None)` when incomplete.
pub fn decode(buf: &[u8], v5: bool) -> Result<Option<(Packet<'_>, usize)>, MqttError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut length = 0usize;
    let mut at = 1;
    loop {
        let Some(&b) = buf.get(at) else {
            return Ok(None);
        };
        length |= usize::from(b & 0x7f) << (7 * (at - 1));
        at += 1;
        if b & 0x80 == 0 {
            break;
        }
        if at > 4 {
            return Err(MqttError::Length);
        }
    }
    if length > MAX_PACKET {
        return Err(MqttError::Length);
    }
    let total = at + length;
    if buf.len() < total {
        return Ok(None);
    }
    let body = &buf[at..total];
    let kind = first >> 4;
    let u16_at =
        |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*body.get(i)?, *body.get(i + 1)?])) };
    let packet = match kind {
        2 if body.len() == 2 || (v5 && body.len() > 2) => Packet::ConnAck(body[1]),
        9 if body.len() >= 3 => Packet::SubAck(body[body.len() - 1]),
        4 if body.len() >= 2 => match body.get(2) {
            Some(&reason) if v5 && reason >= 0x80 => Packet::PubRefused(reason),
            _ => Packet::PubAck(u16_at(0).expect("two bytes")),
        },
        13 => Packet::PingResp,
        14 if v5 => Packet::Disconnect(body.first().copied().unwrap_or(0)),
        3 => {
            let qos = (first >> 1) & 3;
            let topic = usize::from(u16_at(0).ok_or(MqttError::BadPublish("no topic"))?);
            let mut start = 2 + topic;
            let ack = match qos {
                0 => None,
                1 => {
                    let id = u16_at(start).ok_or(MqttError::BadPublish("no packet id"))?;
                    start += 2;
                    Some(id)
                }
                _ => return Err(MqttError::BadPublish("QoS 2 or 3")),
            };
            if v5 {
                let (len, used) = body
                    .get(start..)
                    .and_then(varint)
                    .ok_or(MqttError::BadPublish("no properties"))?;
                start += used + len;
            }
            let payload = body
                .get(start..)
                .ok_or(MqttError::BadPublish("topic longer than the packet"))?;
            Packet::Publish { payload, ack }
        }
        other => return Err(MqttError::Unexpected(other)),
    };
    Ok(Some((packet, total)))
}

/// Appends MQTT's variable-length encoding of `n`.
fn put_length(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            return;
        }
    }
}

fn put_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// CONNECT (MQTT 3.1.1, or 5 when `v5`; clean session, no keep-alive: the broker never times
/// the connection out) as `client_id`.
/// `login`: a username, and its password if any.
pub fn connect(client_id: &str, v5: bool, login: Option<(&str, Option<&str>)>, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(16 + client_id.len());
    put_str("MQTT", &mut body);
    body.push(if v5 { 5 } else { 4 }); // protocol level: 4 is 3.1.1
                                       // Clean session (clean start); the username and password flags when they follow.
    body.push(match login {
        None => 0x02,
        Some((_, None)) => 0x82,
        Some((_, Some(_))) => 0xc2,
    });
    body.extend_from_slice(&0u16.to_be_bytes()); // keep-alive off
    if v5 {
        body.push(0); // no properties
    }
    put_str(client_id, &mut body);
    if let Some((user, password)) = login {
        put_str(user, &mut body);
        if let Some(p) = password {
            put_str(p, &mut body);
        }
    }
    out.push(0x10);
    put_length(body.len(), out);
    out.extend_from_slice(&body);
}

/// SUBSCRIBE to `filter` at `qos`, packet id `id` (`v5`: with an empty properties block).
pub fn subscribe(filter: &str, qos: u8, id: u16, v5: bool, out: &mut Vec<u8>) {
    out.push(0x82);
    put_length(2 + usize::from(v5) + 2 + filter.len() + 1, out);
    out.extend_from_slice(&id.to_be_bytes());
    if v5 {
        out.push(0);
    }
    put_str(filter, out);
    out.push(qos);
}

/// The bytes of a PUBLISH of a `size`-byte payload on `topic` at `qos`, up to the payload; at
/// QoS 1 its last two bytes are the packet id, to be written per message.
///
/// MQTT 5: the properties block (empty) follows the packet id; the id's place is then 3 bytes
/// from the end.
pub fn publish_prefix(topic: &str, qos: u8, size: usize, v5: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + topic.len());
    out.push(0x30 | (qos << 1));
    let id = if qos > 0 { 2 } else { 0 };
    put_length(2 + topic.len() + id + usize::from(v5) + size, &mut out);
    put_str(topic, &mut out);
    out.extend(std::iter::repeat_n(0, id));
    if v5 {
        out.push(0);
    }
    out
}

/// PUBACK of packet `id`.
pub fn puback(id: u16, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0x40, 0x02]);
    out.extend_from_slice(&id.to_be_bytes());
}

/// What a CONNACK's refusal means.
pub fn connack_refusal(code: u8) -> &'static [u8] {
    match code {
        1 => b"connection refused: unacceptable protocol version (msgbench speaks MQTT 3.1.1, and 5 with broker = \"mqtt5\")",
        0x84 => b"connection refused: unsupported protocol version (MQTT 5 reason 0x84; try broker = \"mqtt\", MQTT 3.1.1)",
        0x85 => b"connection refused: client identifier not valid (MQTT 5 reason 0x85)",
        0x86 => b"connection refused: bad user name or password (MQTT 5 reason 0x86)",
        0x87 => b"connection refused: not authorized (MQTT 5 reason 0x87)",
        0x88 => b"connection refused: server unavailable (MQTT 5 reason 0x88)",
        0x89 => b"connection refused: server busy (MQTT 5 reason 0x89)",
        2 => b"connection refused: client identifier rejected",
        3 => b"connection refused: server unavailable",
        4 => b"connection refused: bad user name or password",
        5 => b"connection refused: not authorized",
        _ => b"connection refused (CONNACK return code not 0)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_every_prefix_is_incomplete() {
        let mut stream = vec![0x20, 0x02, 0x00, 0x00, 0x90, 0x03, 0x00, 0x01, 0x01];
        let mut publish = publish_prefix("t.0", 1, 5, false);
        let n = publish.len();
        publish[n - 2..].copy_from_slice(&7u16.to_be_bytes());
        publish.extend_from_slice(b"hello");
        stream.extend_from_slice(&publish);
        stream.extend_from_slice(&publish_prefix("t.0", 0, 3, false));
        stream.extend_from_slice(b"abc");
        stream.extend_from_slice(&[0x40, 0x02, 0x00, 0x09, 0xd0, 0x00]);
        let mut seen = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            for cut in at..stream.len() {
                if let Some((_, used)) = decode(&stream[at..cut], false).unwrap() {
                    assert!(used <= cut - at);
                }
            }
            let (p, used) = decode(&stream[at..], false).unwrap().unwrap();
            seen.push(format!("{p:?}"));
            at += used;
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[0], "ConnAck(0)");
        assert_eq!(seen[1], "SubAck(1)");
        assert_eq!(
            seen[2],
            format!(
                "{:?}",
                Packet::Publish {
                    payload: b"hello",
                    ack: Some(7)
                }
            )
        );
        assert_eq!(
            seen[3],
            format!(
                "{:?}",
                Packet::Publish {
                    payload: b"abc",
                    ack: None
                }
            )
        );
        assert_eq!(
            (seen[4].as_str(), seen[5].as_str()),
            ("PubAck(9)", "PingResp")
        );
    }

    #[test]
    fn lengths_take_one_to_four_bytes() {
        for n in [
            0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, MAX_PACKET,
        ] {
            let mut out = vec![0xd0];
            put_length(n, &mut out);
            out.resize(out.len() + n, 0);
            let (_, used) = decode(&out, false).unwrap().unwrap();
            assert_eq!(used, out.len());
        }
    }

    #[test]
    fn what_no_broker_sends_is_refused() {
        assert_eq!(decode(&[0x10, 0x00], false), Err(MqttError::Unexpected(1)));
        assert_eq!(
            decode(&[0xd0, 0xff, 0xff, 0xff, 0xff, 0x01], false),
            Err(MqttError::Length)
        );
        assert_eq!(
            decode(&[0xd0, 0xff, 0xff, 0xff, 0x7f], false),
            Err(MqttError::Length)
        );
        assert!(matches!(
            decode(&[0x34, 0x03, 0x00, 0x01, b't'], false),
            Err(MqttError::BadPublish(_))
        ));
        assert!(matches!(
            decode(&[0x30, 0x02, 0x00, 0x09], false),
            Err(MqttError::BadPublish(_))
        ));
        assert_eq!(decode(&[0x30], false).unwrap(), None);
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..24);
            let b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let _ = decode(&b, false);
        }
    }

    #[test]
    fn connect_and_subscribe_are_spelled_as_the_standard_says() {
        let mut c = Vec::new();
        connect("m", false, None, &mut c);
        assert_eq!(
            c,
            [0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 0, 0, 1, b'm']
        );
        // A username and password: their flags (0x80, 0x40), then each as a string.
        let mut l = Vec::new();
        connect("m", false, Some(("u", Some("pw"))), &mut l);
        assert_eq!(
            l,
            [
                0x10, 20, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xc2, 0, 0, 0, 1, b'm', 0, 1, b'u', 0,
                2, b'p', b'w'
            ]
        );
        let mut s = Vec::new();
        subscribe("a/b", 1, 5, false, &mut s);
        assert_eq!(s, [0x82, 8, 0, 5, 0, 3, b'a', b'/', b'b', 1]);
        let mut a = Vec::new();
        puback(258, &mut a);
        assert_eq!(a, [0x40, 2, 1, 2]);
    }

    #[test]
    fn mqtt_5_packets_carry_properties_that_are_skipped() {
        // CONNACK with properties (receive maximum 10), SUBACK with a property block, a QoS 1
        // PUBLISH with properties, a PUBACK refusing (0x87), a DISCONNECT.
        let mut stream = vec![0x20, 0x06, 0x00, 0x00, 0x03, 0x21, 0x00, 0x0a];
        stream.extend_from_slice(&[0x90, 0x04, 0x00, 0x01, 0x00, 0x01]);
        let mut publish = publish_prefix("t.0", 1, 5, true);
        let n = publish.len();
        publish[n - 3..n - 1].copy_from_slice(&7u16.to_be_bytes());
        publish.extend_from_slice(b"hello");
        stream.extend_from_slice(&publish);
        stream.extend_from_slice(&[0x40, 0x03, 0x00, 0x09, 0x87]);
        stream.extend_from_slice(&[0xe0, 0x01, 0x8b]);
        let mut seen = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let (p, used) = decode(&stream[at..], true).unwrap().unwrap();
            seen.push(p);
            at += used;
        }
        assert_eq!(
            seen,
            [
                Packet::ConnAck(0),
                Packet::SubAck(1),
                Packet::Publish {
                    payload: b"hello",
                    ack: Some(7)
                },
                Packet::PubRefused(0x87),
                Packet::Disconnect(0x8b),
            ]
        );
        let mut out = Vec::new();
        connect("c", true, None, &mut out);
        assert_eq!(out[8], 5);
        subscribe("t.0", 1, 3, true, &mut out);
    }
}
