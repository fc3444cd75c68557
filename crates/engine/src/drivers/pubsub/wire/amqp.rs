//! AMQP 0.9.1 as RabbitMQ speaks it, as bytes. The opening's methods (connection, channel,
//! exchanges, queues, consumers, confirms) are made and read by `amq-protocol`, the codec of
//! lapin, RabbitMQ's Rust client. What happens once per message is by hand: the frame envelope
//! (seven bytes and an end byte), a delivery's three frames read in place (its payload a slice
//! of the input, never copied), a publish's constant framing (`amq-protocol` writes it once
//! per publisher), the confirms and acknowledgements (twelve bytes each) — `amq-protocol`
//! parses a delivery into owned strings and a body into a new `Vec`, three allocations and a
//! copy per message, in the loop that must never bound the run. The tests check every
//! hand-made frame against `amq-protocol`'s own.
use amq_protocol::frame::{gen_frame, AMQPContentHeader, AMQPFrame, WriteContext};
use amq_protocol::protocol::{basic, AMQPClass};

/// What a connection sends first: "AMQP", 0, then the version 0-9-1.
pub const PROTOCOL_HEADER: &[u8] = b"AMQP\x00\x00\x09\x01";
/// A frame's last byte.
pub const FRAME_END: u8 = 0xCE;
/// A method frame's type.
pub const METHOD: u8 = 1;
/// A content header frame's type.
pub const HEADER: u8 = 2;
/// A content body frame's type.
pub const BODY: u8 = 3;
/// A heartbeat frame's type.
pub const HEARTBEAT: u8 = 8;
/// A heartbeat, as sent and as answered.
pub const HEARTBEAT_FRAME: &[u8] = &[HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END];
/// The frame size msgbench offers (RabbitMQ's default `frame_max`): a message and its eight
/// bytes of framing must fit one body frame.
pub const FRAME_MAX: u32 = 131_072;
/// The channel every connection uses (one each).
pub const CHANNEL: u16 = 1;

/// One frame, its payload in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its type ([`METHOD`], [`HEADER`], [`BODY`], [`HEARTBEAT`]).
    pub kind: u8,
    /// Its channel.
    pub channel: u16,
    /// Its payload.
    pub payload: &'a [u8],
}

/// The frame at the start of `buf` and the bytes it takes; `Ok(None)` when incomplete; an error
/// for a frame over [`FRAME_MAX`] or without its end byte.
pub fn frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, String> {
    if buf.len() < 7 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]);
    if size > FRAME_MAX {
        return Err(if buf.starts_with(b"AMQP") {
            "the broker answered with its protocol header: it does not speak AMQP 0-9-1".into()
        } else {
            format!("a frame of {size} bytes, over the {FRAME_MAX} agreed: not AMQP 0-9-1")
        });
    }
    let end = 7 + size as usize;
    if buf.len() <= end {
        return Ok(None);
    }
    if buf[end] != FRAME_END {
        return Err(format!(
            "a frame ends with 0x{:02x}, not 0xCE: not AMQP 0-9-1",
            buf[end]
        ));
    }
    let frame = Frame {
        kind: buf[0],
        channel: u16::from_be_bytes([buf[1], buf[2]]),
        payload: &buf[7..end],
    };
    Ok(Some((frame, end + 1)))
}

/// What a running connection received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<'a> {
    /// `basic.deliver` with its content: the delivery tag and the body.
    Delivery {
        /// Its delivery tag (to acknowledge it).
        tag: u64,
        /// Its body.
        payload: &'a [u8],
    },
    /// `basic.ack` (`nack: false`) or `basic.nack` of a publisher's publishes: up to `tag`
    /// when `multiple`, else `tag` alone.
    Confirm {
        /// The publish's number (1 for the first after `confirm.select`).
        tag: u64,
        /// Every publish up to `tag`.
        multiple: bool,
        /// The broker refused them.
        nack: bool,
    },
    /// `channel.close` or `connection.close`: the broker's code and text.
    Closed {
        /// Its reply code (403 access refused, 404 not found, 406 precondition failed, …).
        code: u16,
        /// Its text.
        text: &'a [u8],
    },
    /// `basic.cancel`: the broker ended the consumer (its queue deleted).
    Cancelled,
    /// `connection.close-ok`: the broker took everything before the client's close.
    CloseOk,
    /// A heartbeat: answer one.
    Heartbeat,
    /// Anything else (`connection.blocked`, `channel.flow`, …).
    Other,
}

/// The next thing at the start of `buf` and the bytes it takes (a delivery's three frames
/// together); `Ok(None)` when incomplete.
pub fn receive(buf: &[u8]) -> Result<Option<(Received<'_>, usize)>, String> {
    let Some((f, used)) = frame(buf)? else {
        return Ok(None);
    };
    let received = match f.kind {
        METHOD => match method_id(f.payload)? {
            (60, 60) => return delivery(buf, f.payload, used),
            (60, 80) | (60, 120) => {
                let (tag, bits) = tag_and_bits(f.payload)?;
                Received::Confirm {
                    tag,
                    multiple: bits & 1 == 1,
                    nack: method_id(f.payload)?.1 == 120,
                }
            }
            (20, 40) | (10, 50) => closed(f.payload)?,
            (60, 30) => Received::Cancelled,
            (10, 51) => Received::CloseOk,
            _ => Received::Other,
        },
        HEARTBEAT => Received::Heartbeat,
        HEADER | BODY => return Err("content without its basic.deliver".into()),
        kind => return Err(format!("a frame of type {kind}: not AMQP 0-9-1")),
    };
    Ok(Some((received, used)))
}

/// A method's class and method ids.
fn method_id(payload: &[u8]) -> Result<(u16, u16), String> {
    if payload.len() < 4 {
        return Err("a method frame shorter than its ids".into());
    }
    Ok((
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    ))
}

/// `basic.ack`/`basic.nack`'s delivery tag and flag bits.
fn tag_and_bits(payload: &[u8]) -> Result<(u64, u8), String> {
    let Some(args) = payload.get(4..13) else {
        return Err("a basic.ack shorter than its arguments".into());
    };
    let tag = u64::from_be_bytes(args[..8].try_into().expect("8 bytes"));
    Ok((tag, args[8]))
}

/// A short string at `at` of `payload`: its bytes and where the next field starts.
fn short_string(payload: &[u8], at: usize) -> Result<(&[u8], usize), String> {
    let len = *payload.get(at).ok_or("a method cut in its arguments")? as usize;
    let text = payload
        .get(at + 1..at + 1 + len)
        .ok_or("a method cut in its arguments")?;
    Ok((text, at + 1 + len))
}

/// `channel.close` or `connection.close`: its reply code and text.
fn closed(payload: &[u8]) -> Result<Received<'_>, String> {
    let code = payload
        .get(4..6)
        .ok_or("a close method cut in its arguments")?;
    let (text, _) = short_string(payload, 6)?;
    Ok(Received::Closed {
        code: u16::from_be_bytes([code[0], code[1]]),
        text,
    })
}

/// A delivery: `basic.deliver` (`method`, taking `used` bytes of `buf`), then its content
/// header and body, read in place once all three are in `buf`.
fn delivery<'a>(
    buf: &'a [u8],
    method: &[u8],
    used: usize,
) -> Result<Option<(Received<'a>, usize)>, String> {
    // consumer-tag, delivery-tag, redelivered, exchange, routing-key.
    let (_, at) = short_string(method, 4)?;
    let tag = method
        .get(at..at + 8)
        .ok_or("a basic.deliver cut in its arguments")?;
    let tag = u64::from_be_bytes(tag.try_into().expect("8 bytes"));
    let Some((header, header_used)) = frame(&buf[used..])? else {
        return Ok(None);
    };
    if header.kind != HEADER || header.payload.len() < 12 {
        return Err("a basic.deliver not followed by its content header".into());
    }
    let body_size = u64::from_be_bytes(header.payload[4..12].try_into().expect("8 bytes"));
    let mut end = used + header_used;
    if body_size == 0 {
        let delivery = Received::Delivery { tag, payload: &[] };
        return Ok(Some((delivery, end)));
    }
    let Some((body, body_used)) = frame(&buf[end..])? else {
        return Ok(None);
    };
    if body.kind != BODY || body.payload.len() as u64 != body_size {
        return Err(format!(
            "a delivery of {body_size} bytes not in one body frame (msgbench reads a message whole: message_bytes + 8 must be at most the frame size, {FRAME_MAX})"
        ));
    }
    end += body_used;
    let delivery = Received::Delivery {
        tag,
        payload: body.payload,
    };
    Ok(Some((delivery, end)))
}

/// Appends `basic.ack` of delivery `tag` (not multiple) on [`CHANNEL`].
pub fn ack(tag: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&[METHOD, 0, CHANNEL as u8, 0, 0, 0, 13, 0, 60, 0, 80]);
    out.extend_from_slice(&tag.to_be_bytes());
    out.extend_from_slice(&[0, FRAME_END]);
}

/// `connection.close` with reply code 200 (a normal close), said by a publisher at its end.
pub fn close() -> Vec<u8> {
    use amq_protocol::protocol::connection;
    method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "msgbench: the run ended".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
}

/// The bytes of `class` as a method frame on `channel`.
pub fn method(channel: u16, class: AMQPClass) -> Vec<u8> {
    encode(&AMQPFrame::Method(channel, class))
}

/// The bytes of `frame`.
fn encode(frame: &AMQPFrame) -> Vec<u8> {
    gen_frame(frame)(WriteContext::from(Vec::new()))
        .expect("a frame is written to a growing Vec")
        .write
}

/// A publisher's framing on [`CHANNEL`]: `basic.publish` to `exchange` with `routing_key`,
/// the content header of a `body`-byte message (delivery mode 2 when `persistent`), and the
/// body frame's header; the payload follows, then [`FRAME_END`].
pub fn publish_prefix(exchange: &str, routing_key: &str, body: u32, persistent: bool) -> Vec<u8> {
    let publish = basic::AMQPMethod::Publish(basic::Publish {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory: false,
        immediate: false,
    });
    let mut properties = basic::AMQPProperties::default();
    if persistent {
        properties = properties.with_delivery_mode(2);
    }
    let header = AMQPContentHeader {
        class_id: 60,
        body_size: u64::from(body),
        properties,
    };
    let mut out = method(CHANNEL, AMQPClass::Basic(publish));
    out.extend_from_slice(&encode(&AMQPFrame::Header(CHANNEL, header)));
    out.push(BODY);
    out.extend_from_slice(&CHANNEL.to_be_bytes());
    out.extend_from_slice(&body.to_be_bytes());
    out
}

/// Reads one method frame's class with `amq-protocol` (the opening's answers).
pub fn parse_method(payload: &[u8]) -> Result<AMQPClass, String> {
    match amq_protocol::protocol::parse_class(payload) {
        Ok((_, class)) => Ok(class),
        Err(e) => Err(format!("a method the codec cannot read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(tag: u64, body: &[u8]) -> Vec<u8> {
        deliver_saying(tag, body, body.len() as u64)
    }

    /// A delivery whose content header says `body_size`.
    fn deliver_saying(tag: u64, body: &[u8], body_size: u64) -> Vec<u8> {
        let deliver = basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: "t0-s0-c0".into(),
            delivery_tag: tag,
            redelivered: false,
            exchange: "msgbench.0".into(),
            routing_key: "msgbench.0".into(),
        });
        let header = AMQPContentHeader {
            class_id: 60,
            body_size,
            properties: basic::AMQPProperties::default(),
        };
        let mut out = method(CHANNEL, AMQPClass::Basic(deliver));
        out.extend(encode(&AMQPFrame::Header(CHANNEL, header)));
        out.extend(encode(&AMQPFrame::Body(CHANNEL, body.to_vec())));
        out
    }

    #[test]
    fn a_delivery_is_read_in_place_once_its_three_frames_came() {
        let bytes = deliver(7, b"hello");
        for cut in 0..bytes.len() {
            assert_eq!(receive(&bytes[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (received, used) = receive(&bytes).unwrap().unwrap();
        assert_eq!(
            received,
            Received::Delivery {
                tag: 7,
                payload: b"hello"
            }
        );
        assert_eq!(used, bytes.len());
    }

    #[test]
    fn hand_made_frames_are_the_codec_s_own() {
        let codec = method(
            CHANNEL,
            AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: 0x0102_0304_0506_0708,
                multiple: false,
            })),
        );
        let mut hand = Vec::new();
        ack(0x0102_0304_0506_0708, &mut hand);
        assert_eq!(hand, codec);
        assert_eq!(encode(&AMQPFrame::Heartbeat), HEARTBEAT_FRAME);
        // A publish: the prefix, the payload and the end byte are the codec's three frames.
        let mut publish = publish_prefix("x", "k", 3, true);
        publish.extend_from_slice(b"abc");
        publish.push(FRAME_END);
        let body = encode(&AMQPFrame::Body(CHANNEL, b"abc".to_vec()));
        assert!(publish.ends_with(&body));
    }

    #[test]
    fn confirms_closes_and_hostile_frames_are_told_apart() {
        let multiple = method(
            CHANNEL,
            AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: 9,
                multiple: true,
            })),
        );
        let confirm = Received::Confirm {
            tag: 9,
            multiple: true,
            nack: false,
        };
        assert_eq!(receive(&multiple).unwrap(), Some((confirm, multiple.len())));
        let close = method(
            CHANNEL,
            AMQPClass::Channel(amq_protocol::protocol::channel::AMQPMethod::Close(
                amq_protocol::protocol::channel::Close {
                    reply_code: 406,
                    reply_text: "PRECONDITION_FAILED".into(),
                    class_id: 50,
                    method_id: 10,
                },
            )),
        );
        let (closed, _) = receive(&close).unwrap().unwrap();
        assert_eq!(
            closed,
            Received::Closed {
                code: 406,
                text: b"PRECONDITION_FAILED"
            }
        );
        // A frame past the agreed size, a wrong end byte, a body without its delivery.
        assert!(receive(&[1, 0, 1, 0x7f, 0, 0, 0, 0]).is_err());
        assert!(receive(&[8, 0, 0, 0, 0, 0, 0, 0x00]).is_err());
        assert!(receive(&[3, 0, 1, 0, 0, 0, 1, b'x', FRAME_END]).is_err());
        // A body over one frame (its first frame holds 4 of its 10 bytes).
        let split = deliver_saying(1, b"abcd", 10);
        assert!(receive(&split)
            .unwrap_err()
            .contains("not in one body frame"));
    }
}
