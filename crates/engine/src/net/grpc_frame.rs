//! gRPC's message framing on a stream: each message a flag byte (0: uncompressed), its length
//! (4 bytes, big-endian) and its bytes. [`Frames`] cuts the DATA frames of a response stream
//! into messages, for every reader of a stream of them (a feed, a bidirectional call); [`put`]
//! frames one.
//!
//! A message is handed out as a slice of the DATA frame it came in (`Bytes::slice`: a reference
//! count, no copy); only a message split across frames is put together in a buffer the reader
//! keeps.
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Largest gRPC message accepted (gRPC's own default limit).
pub const MAX_MESSAGE: usize = 4 << 20;

/// A stream's DATA frames, being cut into messages.
#[derive(Debug, Default)]
pub struct Frames {
    /// What is left of the DATA frame being cut.
    chunk: Bytes,
    /// A message that spans frames, as far as it came.
    partial: BytesMut,
}

impl Frames {
    /// Takes the next DATA frame; the last one must have been cut to its end ([`Frames::cut`]
    /// returned `None`).
    pub fn push(&mut self, data: Bytes) {
        debug_assert!(self.chunk.is_empty(), "a frame is used up before the next");
        self.chunk = data;
    }

    /// Nothing received is waiting to be cut (a stream may end here).
    pub fn is_empty(&self) -> bool {
        self.chunk.is_empty() && self.partial.is_empty()
    }

    /// The next whole message in what has come, if one is there; or why the stream is not
    /// gRPC (a compressed message, one over [`MAX_MESSAGE`], a bad flag).
    pub fn cut(&mut self) -> Result<Option<Bytes>, String> {
        if self.partial.is_empty() {
            if self.chunk.is_empty() {
                return Ok(None);
            }
            if let Some(length) = whole(&self.chunk)? {
                let message = self.chunk.slice(5..5 + length);
                self.chunk.advance(5 + length);
                return Ok(Some(message));
            }
        }
        // A message across frames: gather it (its head first, to know its length).
        let wanted = |partial: &BytesMut| match partial.len() {
            n if n < 5 => 5,
            _ => 5 + u32::from_be_bytes(partial[1..5].try_into().expect("4")) as usize,
        };
        loop {
            let missing = wanted(&self.partial) - self.partial.len();
            let take = missing.min(self.chunk.len());
            let before = self.partial.len();
            self.partial.extend_from_slice(&self.chunk[..take]);
            self.chunk.advance(take);
            if before < 5 && self.partial.len() == 5 {
                check_head(&self.partial)?; // its length is known now: is it allowed?
            }
            if self.partial.len() < wanted(&self.partial) {
                if self.chunk.is_empty() {
                    return Ok(None);
                }
                continue;
            }
            let mut message = self.partial.split().freeze();
            message.advance(5);
            return Ok(Some(message));
        }
    }
}

/// Appends `message`'s gRPC frame head (uncompressed, `length` bytes) to `out`.
pub fn put_head(out: &mut BytesMut, length: usize) {
    out.put_u8(0);
    out.put_u32(length as u32);
}

/// The call's `grpc-status` in `headers` (trailers, or the head of a trailers-only answer):
/// `None` when there is none; `Ok` for 0; else the status by name with its message, as it is
/// counted (`gRPC UNAVAILABLE: going away`).
pub fn status(headers: &http::HeaderMap) -> Option<Result<(), String>> {
    let code = headers.get("grpc-status")?;
    Some(
        match code
            .to_str()
            .ok()
            .and_then(|c| c.trim().parse::<u32>().ok())
        {
            Some(0) => Ok(()),
            Some(code) => {
                let message = headers
                    .get("grpc-message")
                    .and_then(|v| v.to_str().ok())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                Err(format!(
                    "gRPC {}{message}",
                    msgbench_model::grpc::status_name(code)
                ))
            }
            None => Err(format!("grpc-status {code:?} is not a number")),
        },
    )
}

/// The length of the message at the start of `chunk` when all of it is there.
fn whole(chunk: &[u8]) -> Result<Option<usize>, String> {
    if chunk.len() < 5 {
        return Ok(None);
    }
    let length = check_head(chunk)?;
    Ok((chunk.len() >= 5 + length).then_some(length))
}

/// A message head's length, or why it cannot be read.
fn check_head(head: &[u8]) -> Result<usize, String> {
    let length = u32::from_be_bytes(head[1..5].try_into().expect("4")) as usize;
    match head[0] {
        0 if length <= MAX_MESSAGE => Ok(length),
        0 => Err(format!(
            "the server sent a gRPC message of {length} bytes, over the {} MiB limit",
            MAX_MESSAGE >> 20
        )),
        1 => Err("the server sent a compressed message (msgbench asked for none)".into()),
        flag => Err(format!(
            "a gRPC message head with the flag {flag} (0 or 1 expected)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for m in messages {
            put_head(&mut out, m.len());
            out.extend_from_slice(m);
        }
        out.to_vec()
    }

    /// Cuts `wire` delivered in DATA frames of `size` bytes, as a reader does.
    fn cut_all(wire: &[u8], size: usize) -> Result<Vec<Vec<u8>>, String> {
        let mut frames = Frames::default();
        let mut out = Vec::new();
        for piece in wire.chunks(size) {
            frames.push(Bytes::copy_from_slice(piece));
            while let Some(m) = frames.cut()? {
                out.push(m.to_vec());
            }
        }
        assert!(frames.is_empty(), "nothing left over");
        Ok(out)
    }

    #[test]
    fn messages_are_cut_however_the_frames_split_them() {
        let messages: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; (i as usize * 7) % 50]).collect();
        let refs: Vec<&[u8]> = messages.iter().map(|m| m.as_slice()).collect();
        let wire = framed(&refs);
        for size in [1, 2, 3, 4, 5, 6, 7, 11, 64, 1000, wire.len()] {
            assert_eq!(
                cut_all(&wire, size).unwrap(),
                messages,
                "frames of {size} bytes"
            );
        }
    }

    #[test]
    fn compressed_oversized_and_odd_heads_are_refused() {
        let mut compressed = framed(&[b"abc"]);
        compressed[0] = 1;
        let mut huge = vec![0u8];
        huge.extend_from_slice(&(64u32 << 20).to_be_bytes());
        let mut odd = framed(&[b"x"]);
        odd[0] = 7;
        for (wire, says) in [
            (compressed, "compressed"),
            (huge, "over the 4 MiB limit"),
            (odd, "flag 7"),
        ] {
            for size in [1, 3, wire.len()] {
                match cut_all(&wire, size) {
                    Err(why) => assert!(why.contains(says), "{why}"),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}
