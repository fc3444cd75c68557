//! NATS NKeys and `.creds` files: a user's Ed25519 seed (`SU…`) signs the nonce of the
//! server's `INFO`, and `CONNECT` carries the public key (`nkey`) or the user's JWT (`jwt`,
//! from a `.creds` file) with the signature (`sig`). Ed25519 is `ring`'s; the seed's text is
//! base32 (RFC 4648, no padding) with a CRC-16/XMODEM, decoded here by hand — one alphabet
//! and one checksum, fewer lines than a crate's setup.
use base64::Engine;
use ring::signature::{Ed25519KeyPair, KeyPair};

/// The prefix byte of a seed (`S`), as NKeys encode it.
const PREFIX_SEED: u8 = 18 << 3;
const PREFIX_USER: u8 = 20 << 3;

/// Whose key an NKey is: its public key's first letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An operator (`O`): signs accounts' JWTs.
    Operator,
    /// An account (`A`): signs its users' JWTs.
    Account,
    /// A user (`U`): logs in.
    User,
}

impl Kind {
    fn prefix(self) -> u8 {
        match self {
            Kind::Operator => 14 << 3,
            Kind::Account => 0,
            Kind::User => PREFIX_USER,
        }
    }
}
const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// A key pair, from its seed.
pub struct NKey {
    pair: Ed25519KeyPair,
    public: String,
}

impl NKey {
    /// The key pair of a user seed (`SU…`); an error says what is wrong with the text, never
    /// the text.
    pub fn from_seed(seed: &str) -> Result<NKey, String> {
        match NKey::of_kind(seed)? {
            (key, Kind::User) => Ok(key),
            _ => Err("is not a user's seed (it must begin with SU)".into()),
        }
    }

    /// The key pair of a seed of any kind, and its kind.
    pub fn of_kind(seed: &str) -> Result<(NKey, Kind), String> {
        let raw = base32_decode(seed.trim())
            .ok_or("is not base32 text (an NKey seed is 58 characters, A–Z and 2–7)")?;
        if raw.len() != 36 {
            return Err(format!(
                "decodes to {} bytes, where a seed is 36 (is it a seed, SU…, not a public key?)",
                raw.len()
            ));
        }
        let (body, crc) = raw.split_at(34);
        if crc16(body).to_le_bytes() != crc {
            return Err("fails its checksum (a character was changed or lost)".into());
        }
        let prefix = ((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3);
        let kind = [Kind::Operator, Kind::Account, Kind::User]
            .into_iter()
            .find(|k| k.prefix() == prefix);
        let Some(kind) = kind.filter(|_| raw[0] & 0xf8 == PREFIX_SEED) else {
            return Err(
                "is not a seed (it must begin with S and a key's letter, SU for a user)".into(),
            );
        };
        let pair = Ed25519KeyPair::from_seed_unchecked(&raw[2..34])
            .map_err(|_| "is not an Ed25519 seed".to_string())?;
        let public = encode_key(kind.prefix(), pair.public_key().as_ref());
        Ok((NKey { pair, public }, kind))
    }

    /// The public key (`U…`), as the server's configuration names the user.
    pub fn public(&self) -> &str {
        &self.public
    }

    /// `nonce` signed, as `CONNECT`'s `sig` carries it (base64url, no padding).
    pub fn sign(&self, nonce: &[u8]) -> String {
        let signature = self.pair.sign(nonce);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.as_ref())
    }
}

/// A user seed's text for the 32 bytes `seed` (the tests make their users with it).
pub fn encode_seed(seed: &[u8; 32]) -> String {
    encode_seed_of(Kind::User, seed)
}

/// The seed text of a key of `kind` for the 32 bytes `seed`.
pub fn encode_seed_of(kind: Kind, seed: &[u8; 32]) -> String {
    let public = kind.prefix();
    let mut raw = vec![PREFIX_SEED | (public >> 5), (public & 31) << 3];
    raw.extend_from_slice(seed);
    let crc = crc16(&raw);
    raw.extend_from_slice(&crc.to_le_bytes());
    base32_encode(&raw)
}

/// A key's text: its prefix, its 32 bytes and their checksum, in base32.
fn encode_key(prefix: u8, key: &[u8]) -> String {
    let mut raw = vec![prefix];
    raw.extend_from_slice(key);
    let crc = crc16(&raw);
    raw.extend_from_slice(&crc.to_le_bytes());
    base32_encode(&raw)
}

/// A `.creds` file's user JWT and seed.
pub struct Creds {
    /// The user's JWT (signed by its account).
    pub jwt: String,
    /// The user's seed.
    pub seed: String,
}

/// The JWT and the seed of a `.creds` file (as `nsc` writes it: each between its BEGIN and
/// END lines).
pub fn parse_creds(text: &str) -> Result<Creds, String> {
    let after = |begin: &str| -> Option<String> {
        let mut lines = text.lines().skip_while(|l| !l.contains(begin));
        lines.next()?;
        lines
            .map(str::trim)
            .find(|l| !l.is_empty())
            .filter(|l| !l.starts_with("---"))
            .map(str::to_string)
    };
    let jwt = after("BEGIN NATS USER JWT")
        .ok_or("holds no user JWT (no -----BEGIN NATS USER JWT----- line followed by one)")?;
    let seed = after("BEGIN USER NKEY SEED")
        .ok_or("holds no user seed (no -----BEGIN USER NKEY SEED----- line followed by one)")?;
    Ok(Creds { jwt, seed })
}

/// CRC-16/XMODEM (polynomial 0x1021, from 0), as NKeys check their text.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn base32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    let (mut bits, mut value) = (0u32, 0u32);
    for &b in data {
        value = (value << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((value >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((value << (5 - bits)) & 31) as usize] as char);
    }
    out
}

fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut bits, mut value) = (0u32, 0u32);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        value = ((value << 5) | v) & 0xffff;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((value >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_reads_back_to_its_user_and_signs() {
        let seed = encode_seed(&[7u8; 32]);
        assert!(seed.starts_with("SU"), "{seed}");
        assert_eq!(seed.len(), 58);
        let key = NKey::from_seed(&seed).unwrap();
        assert!(key.public().starts_with('U') && key.public().len() == 56);
        let sig = key.sign(b"nonce");
        assert_eq!(sig.len(), 86); // 64 bytes, base64url without padding
                                   // A changed character fails the checksum; a public key is not a seed.
        let mut broken = seed.clone().into_bytes();
        broken[10] = if broken[10] == b'A' { b'B' } else { b'A' };
        let e = NKey::from_seed(std::str::from_utf8(&broken).unwrap())
            .err()
            .unwrap();
        assert!(e.contains("checksum"), "{e}");
        assert!(NKey::from_seed(key.public()).is_err());
        assert!(NKey::from_seed("not base32!").is_err());
    }

    /// The pair in NATS's documentation (docs.nats.io, NKeys): the seed gives that user.
    #[test]
    fn the_documented_seed_gives_the_documented_user() {
        let key =
            NKey::from_seed("SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY").unwrap();
        assert_eq!(
            key.public(),
            "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
        );
    }

    #[test]
    fn a_creds_file_gives_its_jwt_and_seed() {
        let seed = encode_seed(&[1u8; 32]);
        let text = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi.eyJqdGki.c2ln\n------END NATS USER JWT------\n\n************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\n\n-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        let creds = parse_creds(&text).unwrap();
        assert_eq!(creds.jwt, "eyJ0eXAi.eyJqdGki.c2ln");
        assert_eq!(creds.seed, seed);
        assert!(parse_creds("nothing here").is_err());
    }
}
