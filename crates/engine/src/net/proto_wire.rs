//! One field read out of a protobuf message, the rest skipped: a gRPC stream's sequence number
//! and timestamp, 100k times a second. Hand-written rather than decoded with `prost-reflect`
//! (a `DynamicMessage` allocates a map and every field's value per message, and a feed reads
//! two scalars): the wire format's varints and length prefixes are all it takes, the field's
//! numbers and type come resolved from the `.proto` when the scenario is checked
//! ([`msgbench_model::grpc::field_path`]). Nothing here allocates.
use msgbench_model::grpc::{ProtoField, ProtoKind};

/// A value read at a field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A whole number.
    Int(u64),
    /// A `double`.
    Float(f64),
}

/// The message is not protobuf (a truncated varint or field, a field of the wrong wire type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH: u8 = 2;
const FIXED32: u8 = 5;

/// The value of `field` in `message` (`None`: not there — proto3 leaves zeros out). Where it
/// occurs more than once, the last occurrence counts, as protobuf merges.
pub fn read(message: &[u8], field: &ProtoField) -> Result<Option<Value>, Malformed> {
    // Only the last occurrence is converted: an earlier one may hold what the field's type
    // cannot read (a message's own text where a request id was appended after it).
    last(message, &field.numbers)?
        .map(|value| scalar(value, field.kind))
        .transpose()
}

/// The last occurrence of the field at `numbers`, as it sits on the wire.
fn last<'a>(message: &'a [u8], numbers: &[u32]) -> Result<Option<Field<'a>>, Malformed> {
    let mut found = None;
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let value = skip(message, &mut at, wire)?;
        if number != numbers[0] {
            continue;
        }
        let here = if numbers.len() > 1 {
            match value {
                Field::Bytes(inner) => last(inner, &numbers[1..])?,
                _ => return Err(Malformed),
            }
        } else {
            Some(value)
        };
        if here.is_some() {
            found = here;
        }
    }
    Ok(found)
}

/// A field's value as it sits on the wire.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// Reads the value of wire type `wire` at `at` and moves past it.
fn skip<'a>(message: &'a [u8], at: &mut usize, wire: u8) -> Result<Field<'a>, Malformed> {
    let take = |at: &mut usize, n: usize| {
        let bytes = message.get(*at..*at + n).ok_or(Malformed)?;
        *at += n;
        Ok(bytes)
    };
    Ok(match wire {
        VARINT => Field::Varint(varint(message, at)?),
        FIXED64 => Field::Fixed64(u64::from_le_bytes(take(at, 8)?.try_into().expect("8"))),
        FIXED32 => Field::Fixed32(u32::from_le_bytes(take(at, 4)?.try_into().expect("4"))),
        LENGTH => {
            let n = usize::try_from(varint(message, at)?).map_err(|_| Malformed)?;
            Field::Bytes(take(at, n)?)
        }
        _ => return Err(Malformed), // groups (long deprecated) and the unused wire types
    })
}

fn scalar(value: Field<'_>, kind: ProtoKind) -> Result<Value, Malformed> {
    Ok(match (kind, value) {
        (ProtoKind::Varint, Field::Varint(n)) => Value::Int(n),
        (ProtoKind::Zigzag, Field::Varint(n)) => Value::Int((n >> 1) ^ (n & 1).wrapping_neg()),
        (ProtoKind::Fixed32, Field::Fixed32(n)) => Value::Int(n as u64),
        (ProtoKind::Fixed64, Field::Fixed64(n)) => Value::Int(n),
        (ProtoKind::Double, Field::Fixed64(n)) => Value::Float(f64::from_bits(n)),
        (ProtoKind::Timestamp, Field::Bytes(inner)) => timestamp(inner)?,
        (ProtoKind::Text, Field::Bytes(text)) => Value::Int(decimal(text)?),
        _ => return Err(Malformed),
    })
}

/// A `google.protobuf.Timestamp` (`int64 seconds = 1; int32 nanos = 2;`) as Unix ns.
fn timestamp(message: &[u8]) -> Result<Value, Malformed> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match (key >> 3, skip(message, &mut at, (key & 7) as u8)?) {
            (1, Field::Varint(n)) => seconds = n as i64,
            (2, Field::Varint(n)) => nanos = n as i32 as i64,
            _ => {}
        }
    }
    let ns = seconds
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(nanos))
        .filter(|ns| *ns >= 0)
        .ok_or(Malformed)?;
    Ok(Value::Int(ns as u64))
}

/// A string of decimal digits as a number (a request id written as text).
fn decimal(text: &[u8]) -> Result<u64, Malformed> {
    if text.is_empty() || text.len() > 20 {
        return Err(Malformed);
    }
    text.iter()
        .try_fold(0u64, |n, &d| match d {
            b'0'..=b'9' => n
                .checked_mul(10)
                .and_then(|n| n.checked_add((d - b'0') as u64)),
            _ => None,
        })
        .ok_or(Malformed)
}

/// Appends `field` set to `value` to a message in `out`: the field's key and value, inside
/// the keys and lengths of the messages it is nested in. Appended to an encoded message, it
/// overrides any value the message had there (protobuf merges; the last scalar wins), so a
/// message encoded once can carry a new id each time it is sent. Integer kinds and `Text`
/// only (a match field's).
pub fn put_field(out: &mut bytes::BytesMut, field: &ProtoField, value: u64) {
    use bytes::BufMut;
    let mut scratch = [0u8; 10];
    let mut put = |out: &mut bytes::BytesMut, v: u64| {
        let n = put_varint(&mut scratch, v);
        out.put_slice(&scratch[..n]);
    };
    let digits = if value == 0 {
        1
    } else {
        value.ilog10() as usize + 1
    };
    let (wire, leaf_value) = match field.kind {
        ProtoKind::Fixed64 => (FIXED64, 8),
        ProtoKind::Text => (LENGTH, varint_len(digits as u64) + digits),
        ProtoKind::Zigzag => (VARINT, varint_len(value << 1)),
        _ => (VARINT, varint_len(value)),
    };
    let numbers = &field.numbers;
    let last = numbers.len() - 1;
    // Lengths from the inside out: what each enclosing message's length prefix says.
    let mut inner = [0usize; 8];
    inner[last] = varint_len(key(numbers[last], wire)) + leaf_value;
    for level in (0..last).rev() {
        let content = inner[level + 1];
        inner[level] =
            varint_len(key(numbers[level], LENGTH)) + varint_len(content as u64) + content;
    }
    for level in 0..last {
        put(out, key(numbers[level], LENGTH));
        put(out, inner[level + 1] as u64);
    }
    put(out, key(numbers[last], wire));
    match field.kind {
        ProtoKind::Fixed64 => out.put_u64_le(value),
        ProtoKind::Text => {
            put(out, digits as u64);
            let mut text = [0u8; 20];
            let mut v = value;
            for slot in text[..digits].iter_mut().rev() {
                *slot = b'0' + (v % 10) as u8;
                v /= 10;
            }
            out.put_slice(&text[..digits]);
        }
        ProtoKind::Zigzag => put(out, value << 1),
        _ => put(out, value),
    }
}

fn key(number: u32, wire: u8) -> u64 {
    ((number as u64) << 3) | wire as u64
}

fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A base-128 varint at `at` (at most 10 bytes), moving past it.
fn varint(message: &[u8], at: &mut usize) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *message.get(*at).ok_or(Malformed)?;
        *at += 1;
        value |= ((byte & 0x7f) as u64) << shift.min(63);
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(Malformed)
}

/// Writes `value` as a varint at the start of `out` (10 bytes are always enough); returns
/// its length.
pub fn put_varint(out: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        out[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    out[n] = value as u8;
    n + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    // Messages encoded by prost's derive (the encoder every Rust gRPC stack uses), read back.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Stamp {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Header {
        #[prost(string, tag = "1")]
        venue: String,
        #[prost(sint64, tag = "7")]
        offset: i64,
        #[prost(message, optional, tag = "9")]
        at: Option<Stamp>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Trade {
        #[prost(uint64, tag = "1")]
        seq: u64,
        #[prost(fixed64, tag = "2")]
        sent_ns: u64,
        #[prost(bytes = "vec", tag = "3")]
        payload: Vec<u8>,
        #[prost(message, optional, tag = "4")]
        header: Option<Header>,
        #[prost(double, tag = "5")]
        time: f64,
        #[prost(fixed32, tag = "6")]
        small: u32,
        #[prost(repeated, uint64, tag = "8")]
        many: Vec<u64>,
    }

    fn field(numbers: &[u32], kind: ProtoKind) -> ProtoField {
        ProtoField {
            path: "x".into(),
            numbers: numbers.to_vec(),
            kind,
        }
    }

    #[test]
    fn fields_are_read_from_prost_encodings_wherever_they_are() {
        let trade = Trade {
            seq: 300_000_000_000,
            sent_ns: u64::MAX - 5,
            payload: vec![7; 300],
            header: Some(Header {
                venue: "XNAS".into(),
                offset: -12,
                at: Some(Stamp {
                    seconds: 1_732_435_200,
                    nanos: 123_456_789,
                }),
            }),
            time: 1.5,
            small: 99,
            many: vec![1, 2, 3],
        };
        let bytes = trade.encode_to_vec();
        let read = |n: &[u32], k| read(&bytes, &field(n, k));
        assert_eq!(
            read(&[1], ProtoKind::Varint),
            Ok(Some(Value::Int(300_000_000_000)))
        );
        assert_eq!(
            read(&[2], ProtoKind::Fixed64),
            Ok(Some(Value::Int(u64::MAX - 5)))
        );
        assert_eq!(read(&[5], ProtoKind::Double), Ok(Some(Value::Float(1.5))));
        assert_eq!(read(&[6], ProtoKind::Fixed32), Ok(Some(Value::Int(99))));
        assert_eq!(
            read(&[4, 7], ProtoKind::Zigzag),
            Ok(Some(Value::Int(-12i64 as u64)))
        );
        assert_eq!(
            read(&[4, 9], ProtoKind::Timestamp),
            Ok(Some(Value::Int(1_732_435_200_123_456_789)))
        );
        assert_eq!(read(&[10], ProtoKind::Varint), Ok(None), "absent");
        assert_eq!(
            read(&[3], ProtoKind::Varint),
            Err(Malformed),
            "wrong wire type"
        );
        // proto3 leaves zeros out: a first message with seq 0 has no seq field.
        let zero = Trade {
            seq: 0,
            sent_ns: 5,
            ..Trade::default()
        }
        .encode_to_vec();
        assert_eq!(
            super::read(&zero, &field(&[1], ProtoKind::Varint)),
            Ok(None)
        );
    }

    #[test]
    fn varints_written_are_read_back() {
        for value in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut out = [0u8; 10];
            let n = put_varint(&mut out, value);
            let mut at = 0;
            assert_eq!((varint(&out[..n], &mut at), at), (Ok(value), n));
            assert_eq!(prost::encoding::encoded_len_varint(value), n);
        }
    }

    #[test]
    fn an_appended_field_overrides_the_message_s_own_wherever_it_is_nested() {
        for kind in [ProtoKind::Varint, ProtoKind::Zigzag, ProtoKind::Fixed64] {
            let (numbers, base): (&[u32], Trade) = match kind {
                ProtoKind::Varint => (
                    &[1],
                    Trade {
                        seq: 5,
                        payload: vec![1; 9],
                        ..Trade::default()
                    },
                ),
                ProtoKind::Fixed64 => (
                    &[2],
                    Trade {
                        sent_ns: 5,
                        ..Trade::default()
                    },
                ),
                _ => (
                    &[4, 7],
                    Trade {
                        header: Some(Header {
                            venue: "X".into(),
                            offset: 3,
                            at: None,
                        }),
                        ..Trade::default()
                    },
                ),
            };
            for id in [0, 1, 127, 128, 1 << 40, u64::MAX >> 1] {
                let mut out = bytes::BytesMut::from(&base.encode_to_vec()[..]);
                put_field(&mut out, &field(numbers, kind), id);
                let decoded = Trade::decode(&out[..]).expect("prost reads it");
                let got = match kind {
                    ProtoKind::Varint => decoded.seq,
                    ProtoKind::Fixed64 => decoded.sent_ns,
                    _ => {
                        let h = decoded.header.unwrap();
                        assert_eq!(h.venue, "X", "the rest of the nested message is kept");
                        h.offset as u64
                    }
                };
                assert_eq!(got, id, "{kind:?}");
                assert_eq!(read(&out, &field(numbers, kind)), Ok(Some(Value::Int(id))));
                assert_eq!(decoded.payload, base.payload);
            }
        }
        // A string id.
        #[derive(Clone, PartialEq, prost::Message)]
        struct Ask {
            #[prost(string, tag = "3")]
            id: String,
        }
        let mut out = bytes::BytesMut::new();
        put_field(&mut out, &field(&[3], ProtoKind::Text), 90210);
        assert_eq!(Ask::decode(&out[..]).unwrap().id, "90210");
        assert_eq!(
            read(&out, &field(&[3], ProtoKind::Text)),
            Ok(Some(Value::Int(90210)))
        );
        let words = Ask { id: "abc".into() }.encode_to_vec();
        assert_eq!(read(&words, &field(&[3], ProtoKind::Text)), Err(Malformed));
        // The message's own text, then the id appended: the id counts.
        let mut out = bytes::BytesMut::from(&words[..]);
        put_field(&mut out, &field(&[3], ProtoKind::Text), 7);
        assert_eq!(
            read(&out, &field(&[3], ProtoKind::Text)),
            Ok(Some(Value::Int(7)))
        );
    }

    #[test]
    fn the_last_occurrence_counts_and_broken_messages_are_refused() {
        let mut twice = Trade {
            seq: 1,
            ..Trade::default()
        }
        .encode_to_vec();
        twice.extend(
            Trade {
                seq: 2,
                ..Trade::default()
            }
            .encode_to_vec(),
        );
        assert_eq!(
            read(&twice, &field(&[1], ProtoKind::Varint)),
            Ok(Some(Value::Int(2)))
        );
        let bytes = Trade {
            seq: 1 << 40,
            payload: vec![1; 20],
            ..Trade::default()
        }
        .encode_to_vec();
        for cut in 1..bytes.len() {
            // Every truncation fails or finds what precedes the cut, never panics.
            let _ = read(&bytes[..cut], &field(&[3], ProtoKind::Varint));
        }
        assert_eq!(
            read(&bytes[..3], &field(&[1], ProtoKind::Varint)),
            Err(Malformed)
        );
        assert_eq!(
            read(&[0xff; 11], &field(&[1], ProtoKind::Varint)),
            Err(Malformed)
        );
        assert_eq!(
            read(&[0x0b], &field(&[1], ProtoKind::Varint)),
            Err(Malformed),
            "a group"
        );
        let negative = Header {
            at: Some(Stamp {
                seconds: -1,
                nanos: 0,
            }),
            ..Header::default()
        }
        .encode_to_vec();
        assert_eq!(
            read(&negative, &field(&[9], ProtoKind::Timestamp)),
            Err(Malformed)
        );
    }
}
