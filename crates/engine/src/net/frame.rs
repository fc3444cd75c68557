//! msgbench's RPC framing (see `docs/protocol.md`). Little-endian, fixed 36-byte header:
//!
//! ```text
//! u32 length      bytes after this field (32 + payload)
//! u8  kind        1 request, 2 response
//! u8  flags       request: bit 0 = sleep for the service time instead of computing
//! u16 class       operation class (index into the client's mix)
//! u64 id          request id, echoed in the response
//! u64 client_ns   client timestamp, echoed
//! u64 service_ns  request: time to simulate; response: echoed
//! u32 reply_bytes request: payload bytes wanted back; response: 0
//! ... payload
//! ```
//! Hand-written because it is this project's own protocol and sits on the hot path of both the
//! server and the client (decoding is a bounds check and six fixed-offset loads).

/// Bytes of the header including the length field.
pub const HEADER_BYTES: usize = 36;
/// Bytes of the header counted by the length field.
const BODY_HEADER: u32 = 32;
/// `kind` of a request.
pub const KIND_REQUEST: u8 = 1;
/// `kind` of a response.
pub const KIND_RESPONSE: u8 = 2;
/// Request flag: hold the response on a timer instead of computing.
pub const FLAG_SLEEP: u8 = 1;

/// The fixed fields of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Request or response.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Operation class.
    pub class: u16,
    /// Request id.
    pub id: u64,
    /// Client timestamp.
    pub client_ns: u64,
    /// Service time asked for (request), echoed in the response.
    pub service_ns: u64,
    /// Payload bytes wanted back.
    pub reply_bytes: u32,
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length field exceeds the receiver's limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The length field is smaller than the header.
    #[error("frame length {len} is shorter than the 32-byte header")]
    TooShort {
        /// Announced length.
        len: u32,
    },
    /// An unknown or unexpected kind.
    #[error("frame kind {kind} where {expected} was expected")]
    WrongKind {
        /// Kind received.
        kind: u8,
        /// Kind expected.
        expected: u8,
    },
}

/// Appends a frame with `payload` zero bytes to `out`.
#[inline]
pub fn encode(h: &Header, payload: usize, out: &mut Vec<u8>) {
    let len = BODY_HEADER + payload as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.push(h.kind);
    out.push(h.flags);
    out.extend_from_slice(&h.class.to_le_bytes());
    out.extend_from_slice(&h.id.to_le_bytes());
    out.extend_from_slice(&h.client_ns.to_le_bytes());
    out.extend_from_slice(&h.service_ns.to_le_bytes());
    out.extend_from_slice(&h.reply_bytes.to_le_bytes());
    out.resize(out.len() + payload, 0);
}

/// Decodes the frame at the start of `buf`: `Ok(None)` when more bytes are needed, else the
/// header and the frame's total size. Checks the length against `max` (bytes after the length
/// field) before waiting for the rest, so an oversized frame is refused at once.
#[inline]
pub fn decode(
    buf: &[u8],
    max: u32,
    expected_kind: u8,
) -> Result<Option<(Header, usize)>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len < BODY_HEADER {
        return Err(FrameError::TooShort { len });
    }
    if buf[4] != expected_kind {
        return Err(FrameError::WrongKind {
            kind: buf[4],
            expected: expected_kind,
        });
    }
    let total = 4 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let u64_at = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
    Ok(Some((
        Header {
            kind: buf[4],
            flags: buf[5],
            class: u16::from_le_bytes([buf[6], buf[7]]),
            id: u64_at(8),
            client_ns: u64_at(16),
            service_ns: u64_at(24),
            reply_bytes: u32::from_le_bytes(buf[32..36].try_into().expect("4 bytes")),
        },
        total,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(kind: u8) -> impl Strategy<Value = Header> {
        (
            any::<u8>(),
            any::<u16>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(
                move |(flags, class, id, client_ns, service_ns, reply_bytes)| Header {
                    kind,
                    flags,
                    class,
                    id,
                    client_ns,
                    service_ns,
                    reply_bytes,
                },
            )
    }

    proptest! {
        #[test]
        fn frames_round_trip_and_every_prefix_is_incomplete(h in header(KIND_REQUEST), payload in 0usize..300) {
            let mut buf = Vec::new();
            encode(&h, payload, &mut buf);
            prop_assert_eq!(decode(&buf, 1 << 20, KIND_REQUEST), Ok(Some((h, buf.len()))));
            for cut in 0..buf.len() {
                prop_assert_eq!(decode(&buf[..cut], 1 << 20, KIND_REQUEST), Ok(None));
            }
        }

        #[test]
        fn back_to_back_frames_decode_in_order(hs in proptest::collection::vec(header(KIND_RESPONSE), 1..20)) {
            let mut buf = Vec::new();
            for h in &hs {
                encode(h, h.class as usize % 40, &mut buf);
            }
            let mut at = 0;
            for h in &hs {
                let (got, size) = decode(&buf[at..], 1 << 20, KIND_RESPONSE).unwrap().unwrap();
                prop_assert_eq!(got, *h);
                at += size;
            }
            prop_assert_eq!(at, buf.len());
        }

        #[test]
        fn random_bytes_never_panic_and_never_overrun(bytes in proptest::collection::vec(any::<u8>(), 0..200), max in 0u32..1000) {
            match decode(&bytes, max, KIND_REQUEST) {
                Ok(Some((_, size))) => prop_assert!(size <= bytes.len() && size >= HEADER_BYTES),
                Ok(None) => prop_assert!(bytes.len() < 5 || bytes.len() < 4 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize),
                Err(FrameError::TooLarge { len, .. }) => prop_assert!(len > max),
                Err(FrameError::TooShort { len }) => prop_assert!(len < 32),
                Err(FrameError::WrongKind { kind, .. }) => prop_assert_ne!(kind, KIND_REQUEST),
            }
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_from_its_first_bytes() {
        let buf = (2u32 << 20).to_le_bytes();
        let mut b = buf.to_vec();
        b.push(KIND_REQUEST);
        assert_eq!(
            decode(&b, 1 << 20, KIND_REQUEST),
            Err(FrameError::TooLarge {
                len: 2 << 20,
                max: 1 << 20
            })
        );
    }
}
