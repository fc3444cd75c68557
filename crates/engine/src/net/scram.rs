//! The client side of SCRAM (RFC 5802; SHA-256 and SHA-512 as RFC 7677 and Kafka use them):
//! the first message, the proof answering the server's challenge, and the check of the
//! server's signature — so a server that does not know the password is not believed. Without
//! I/O: the caller carries the messages (Kafka's `SaslAuthenticate`). The hashes are `ring`'s.
use base64::Engine;
use ring::{digest, hmac, pbkdf2};
use std::num::NonZeroU32;

/// Most PBKDF2 iterations a server may ask for: Kafka's default is 4 096, its largest 16 384;
/// a hostile server asking for 2³¹ would hold the opening for minutes.
pub const MAX_ITERATIONS: u32 = 1_000_000;
/// Fewest: RFC 7677's and Kafka's minimum. A server asking for fewer (a fake one, without
/// TLS) would get a proof cheap to turn back into the password.
pub const MIN_ITERATIONS: u32 = 4096;

/// SCRAM's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl Hash {
    fn algorithms(
        self,
    ) -> (
        pbkdf2::Algorithm,
        hmac::Algorithm,
        &'static digest::Algorithm,
    ) {
        match self {
            Hash::Sha256 => (
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
                &digest::SHA256,
            ),
            Hash::Sha512 => (
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
                &digest::SHA512,
            ),
        }
    }
}

/// One SCRAM exchange, from the client's first message to the server's last.
pub struct Scram {
    hash: Hash,
    password: String,
    first_bare: String,
    nonce: String,
    /// The server's signature the last message must carry, once the proof is sent.
    server_signature: Option<Vec<u8>>,
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl Scram {
    /// Starts an exchange for `user` with a fresh random nonce.
    pub fn new(hash: Hash, user: &str, password: &str) -> Scram {
        let nonce: [u8; 18] = rand::random();
        Scram::with_nonce(hash, user, password, &B64.encode(nonce))
    }

    /// Starts an exchange with a given client nonce (the RFC's test vectors).
    pub fn with_nonce(hash: Hash, user: &str, password: &str, nonce: &str) -> Scram {
        let name = user.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password: password.to_string(),
            first_bare: format!("n={name},r={nonce}"),
            nonce: nonce.to_string(),
            server_signature: None,
        }
    }

    /// The client's first message (no channel binding).
    pub fn first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The answer to the server's first message (`r=…,s=…,i=…`): the client's proof. An error
    /// for a message that is not SCRAM's, a nonce not extending ours, or iterations out of
    /// bounds.
    pub fn answer(&mut self, server_first: &[u8]) -> Result<String, String> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| "the server's SCRAM challenge is not text".to_string())?;
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("the server refused the login: {error}"));
        }
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for field in text.split(',') {
            match field.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = B64.decode(v).ok(),
                Some(("i=", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!(
                "the server's SCRAM challenge lacks its nonce, salt or iterations: {:?}",
                &text[..text.len().min(120)]
            ));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's SCRAM nonce does not extend msgbench's".into());
        }
        let iterations = NonZeroU32::new(iterations)
            .filter(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&i.get()))
            .ok_or_else(|| {
                format!("the server asks for {iterations} PBKDF2 iterations ({MIN_ITERATIONS} to {MAX_ITERATIONS} are done: fewer would expose the password)")
            })?;
        let (kdf, mac, h) = self.hash.algorithms();
        let mut salted = vec![0u8; h.output_len()];
        pbkdf2::derive(
            kdf,
            iterations,
            &salt,
            self.password.as_bytes(),
            &mut salted,
        );
        let salted = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(h, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.first_bare);
        let signature = hmac::sign(
            &hmac::Key::new(mac, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(mac, server_key.as_ref()),
            auth_message.as_bytes(),
        );
        self.server_signature = Some(server_signature.as_ref().to_vec());
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server's last message (`v=…`): it knew the password.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(server_final);
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("the server refused the login: {error}"));
        }
        let signature = text
            .strip_prefix("v=")
            .and_then(|v| B64.decode(v.split(',').next().unwrap_or_default()).ok());
        match (signature, &self.server_signature) {
            (Some(got), Some(expected)) if &got == expected => Ok(()),
            _ => Err("the server's SCRAM signature is wrong: it does not know the password (is this the broker you meant?)".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 § 3's exchange, to the byte.
    #[test]
    fn the_rfc_7677_sha_256_exchange() {
        let mut s = Scram::with_nonce(Hash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(s.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            s.answer(server_first).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        s.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(s
            .verify(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .is_err());
    }

    #[test]
    fn a_foreign_nonce_huge_iterations_and_a_refusal_are_errors() {
        let mut s = Scram::with_nonce(Hash::Sha512, "a=b,c", "p", "abc");
        assert_eq!(s.first(), "n,,n=a=3Db=2Cc,r=abc");
        assert!(s
            .answer(b"r=xyz123,s=AAAA,i=4096")
            .unwrap_err()
            .contains("nonce"));
        assert!(s
            .answer(b"r=abc123,s=AAAA,i=4000000000")
            .unwrap_err()
            .contains("iterations"));
        assert!(s
            .answer(b"e=invalid-proof")
            .unwrap_err()
            .contains("invalid-proof"));
        assert!(s.answer(b"garbage").unwrap_err().contains("lacks"));
        assert!(s
            .answer(b"r=abc123,s=AAAA,i=1")
            .unwrap_err()
            .contains("expose"));
    }
}
