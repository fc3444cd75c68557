//! What every message of the `pubsub` system carries, whatever the broker: a 24-byte header
//! (intended publish time, sequence number, publisher, the run's mark), then padding.
use msgbench_model::pubsub::HEADER_BYTES;

/// The last 4 bytes of every header: the run's own mark (random per run), so that a
/// subscription tells its run's messages from another run's on the same topic.
pub type RunMark = [u8; 4];

/// What every message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// When the schedule meant it to be published, ns since the run's start (its timeline's
    /// `t0`): latency counts from here. Relative, so that shards — whose `t0` is one agreed
    /// wall-clock instant (`--start-at`) — read each other's messages on their own clocks.
    pub intended_ns: u64,
    /// Its publisher's sequence number: 0, 1, 2, …
    pub seq: u64,
    /// Its publisher (run-wide index).
    pub publisher: u32,
}

impl Header {
    /// Appends a message of `size` bytes (≥ 24): this header with the run's `mark`, then
    /// padding.
    #[inline]
    pub fn write(&self, size: usize, mark: RunMark, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.intended_ns.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.publisher.to_le_bytes());
        out.extend_from_slice(&mark);
        out.resize(out.len() + size - HEADER_BYTES as usize, b'.');
    }

    /// The header of `payload`; `None` for a payload that is not this run's (`mark`).
    #[inline]
    pub fn read(payload: &[u8], mark: RunMark) -> Option<Header> {
        let h = payload.get(..HEADER_BYTES as usize)?;
        if h[20..24] != mark {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        Some(Header {
            intended_ns: word(0),
            seq: word(8),
            publisher: u32::from_le_bytes(h[16..20].try_into().expect("4 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_what_was_written_and_others_payloads_are_not_ours() {
        let h = Header {
            intended_ns: u64::MAX - 3,
            seq: 1 << 40,
            publisher: 7,
        };
        let mut out = Vec::new();
        h.write(100, *b"MSB1", &mut out);
        assert_eq!(out.len(), 100);
        assert_eq!(Header::read(&out, *b"MSB1"), Some(h));
        assert_eq!(Header::read(&out[..23], *b"MSB1"), None);
        // Another run's message (another mark) is not ours.
        assert_eq!(Header::read(&out, *b"MSB2"), None);
    }
}
