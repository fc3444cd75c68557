//! Kafka's batch compression: what a producer writes for each `compression.type`, and what a
//! consumer must read from any producer — gzip (`flate2`), Snappy in the xerial framing Kafka's
//! Java producers write (`snap`'s raw blocks; a bare Snappy block is read too), LZ4's frame
//! format (`lz4_flex`) and Zstandard (`zstd`), at Kafka's default levels (gzip 6, zstd 3).
//! Decompression is bounded: a batch that would inflate past [`MAX_INFLATED`] is an error, not
//! memory.
use msgbench_model::pubsub::Compression;
use std::io::{Read, Write};

/// Most bytes one batch's records may inflate to (the broker's own bound is a batch of
/// `max.message.bytes`, 1 MiB by default, which may inflate many times).
pub const MAX_INFLATED: usize = 64 << 20;

/// xerial's Snappy stream header: a magic, its version and the oldest it is compatible with.
const XERIAL: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];
/// The uncompressed size of each of xerial's blocks (its default).
const XERIAL_BLOCK: usize = 32 * 1024;

/// Appends `raw` compressed with `codec` to `out`.
pub fn compress(codec: Compression, raw: &[u8], out: &mut Vec<u8>) {
    match codec {
        Compression::None => out.extend_from_slice(raw),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(6));
            e.write_all(raw).expect("writing to memory");
            e.finish().expect("writing to memory");
        }
        Compression::Snappy => {
            out.extend_from_slice(&XERIAL);
            let mut encoder = snap::raw::Encoder::new();
            for block in raw.chunks(XERIAL_BLOCK) {
                let compressed = encoder.compress_vec(block).expect("a block under 4 GiB");
                out.extend_from_slice(&(compressed.len() as i32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
        }
        Compression::Lz4 => {
            // Independent blocks: Kafka's LZ4 reader takes no other kind.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            e.write_all(raw).expect("writing to memory");
            e.finish().expect("writing to memory");
        }
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(out, 3).expect("zstd's context");
            e.write_all(raw).expect("writing to memory");
            e.finish().expect("writing to memory");
        }
    }
}

/// The records `data` holds, compressed with `codec`; an error for bytes that are not, or
/// that inflate past [`MAX_INFLATED`].
pub fn decompress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, &'static str> {
    const BROKEN: &str = "a compressed Kafka record batch that does not decompress";
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => bounded(flate2::read::GzDecoder::new(data)),
        Compression::Snappy => unsnappy(data),
        Compression::Lz4 => bounded(lz4_flex::frame::FrameDecoder::new(data)),
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(data).map_err(|_| BROKEN)?;
            // A frame may ask for a window of up to 2 GiB; 16 MiB is more than a batch needs.
            d.window_log_max(24).map_err(|_| BROKEN)?;
            bounded(d)
        }
    }
}

/// Reads all of `reader`, to [`MAX_INFLATED`] bytes.
fn bounded(reader: impl Read) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::new();
    reader
        .take(MAX_INFLATED as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| "a compressed Kafka record batch that does not decompress")?;
    if out.len() > MAX_INFLATED {
        return Err("a compressed Kafka record batch that inflates past 64 MiB");
    }
    Ok(out)
}

/// Snappy: xerial's framing (its header, then blocks each after its length), or one bare
/// block.
fn unsnappy(data: &[u8]) -> Result<Vec<u8>, &'static str> {
    const BROKEN: &str = "a Snappy-compressed Kafka record batch that does not decompress";
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |compressed: &[u8], out: &mut Vec<u8>| -> Result<(), &'static str> {
        let n = snap::raw::decompress_len(compressed).map_err(|_| BROKEN)?;
        if out.len() + n > MAX_INFLATED {
            return Err("a compressed Kafka record batch that inflates past 64 MiB");
        }
        let start = out.len();
        out.resize(start + n, 0);
        decoder
            .decompress(compressed, &mut out[start..])
            .map_err(|_| BROKEN)?;
        Ok(())
    };
    let mut out = Vec::new();
    let Some(mut rest) = data.strip_prefix(&XERIAL[..8]) else {
        block(data, &mut out)?;
        return Ok(out);
    };
    rest = rest.get(8..).ok_or(BROKEN)?; // version, compatible
    while !rest.is_empty() {
        let n = rest.get(..4).ok_or(BROKEN)?;
        let n = i32::from_be_bytes(n.try_into().expect("4"));
        let n = usize::try_from(n).map_err(|_| BROKEN)?;
        let compressed = rest.get(4..4 + n).ok_or(BROKEN)?;
        block(compressed, &mut out)?;
        rest = &rest[4 + n..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_reads_back_what_it_wrote() {
        let raw: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for codec in Compression::ALL {
            let mut out = vec![9u8; 3];
            compress(codec, &raw, &mut out);
            assert_eq!(&out[..3], &[9, 9, 9], "{codec:?} appends");
            if codec != Compression::None {
                assert!(out.len() < raw.len() / 2, "{codec:?}: {}", out.len());
            }
            assert_eq!(decompress(codec, &out[3..]).unwrap(), raw, "{codec:?}");
        }
    }

    #[test]
    fn garbage_and_a_bomb_are_errors_not_memory() {
        for codec in &Compression::ALL[1..] {
            assert!(decompress(*codec, b"\x82SNAPPY\0\0\0\0\x01\0\0\0\x01\x7f\xff").is_err());
            assert!(decompress(*codec, &[0xff; 64]).is_err(), "{codec:?}");
        }
        let zeros = vec![0u8; MAX_INFLATED + 1024];
        let mut bomb = Vec::new();
        compress(Compression::Zstd, &zeros, &mut bomb);
        assert!(decompress(Compression::Zstd, &bomb)
            .unwrap_err()
            .contains("64 MiB"));
    }
}
