//! Kafka's SASL login (KIP-43, KIP-152), on every connection after its TLS and before any other
//! request: `SaslHandshake` v1 naming the mechanism, then `SaslAuthenticate` v1 rounds — PLAIN's
//! one, SCRAM's two ([`crate::net::scram`], whose check of the server's signature means a
//! broker that does not know the password is not believed). Blocking, within the opening's
//! read timeout. The password goes only into these requests, never into a message.
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::kafka::{
    begin, call, error_name, finish, put_i32, put_str, Reader,
};
use crate::net::scram::{Hash, Scram};
use msgbench_model::broker_auth::{Credentials, SaslMechanism};

const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
/// Kafka's code for a mechanism the listener does not take.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka's code for a SASL request where none is expected (a listener without SASL).
const ILLEGAL_SASL_STATE: i16 = 34;

/// Logs in on `stream` with `c` (a user, a password and a mechanism: the model checked them).
pub fn log_in(stream: &mut OpeningStream, c: &Credentials) -> Result<(), String> {
    let mechanism = c.mechanism.unwrap_or(SaslMechanism::ScramSha512);
    let user = c.user.as_deref().unwrap_or_default();
    let password = c.password.as_ref().map_or("", |p| p.expose());
    handshake(stream, mechanism)?;
    let hash = match mechanism {
        SaslMechanism::Plain => {
            authenticate(stream, format!("\0{user}\0{password}").as_bytes(), 3)?;
            return Ok(());
        }
        SaslMechanism::ScramSha256 => Hash::Sha256,
        SaslMechanism::ScramSha512 => Hash::Sha512,
    };
    let mut scram = Scram::new(hash, user, password);
    let challenge = authenticate(stream, scram.first().as_bytes(), 3)?;
    let proof = scram.answer(&challenge)?;
    let last = authenticate(stream, proof.as_bytes(), 4)?;
    scram.verify(&last)
}

/// `SaslHandshake` v1: the listener takes `mechanism`, or says which it takes.
fn handshake(stream: &mut OpeningStream, mechanism: SaslMechanism) -> Result<(), String> {
    let mut out = Vec::new();
    let start = begin(SASL_HANDSHAKE, 1, 2, &mut out);
    put_str(mechanism.name(), &mut out);
    finish(start, &mut out);
    let body = call(stream, &out, 2)?;
    let mut r = Reader::new(&body);
    let code = r.i16()?;
    let mut offered = Vec::new();
    for _ in 0..r.len()? {
        offered.push(String::from_utf8_lossy(r.str()?).into_owned());
    }
    match code {
        0 => Ok(()),
        UNSUPPORTED_SASL_MECHANISM => Err(format!(
            "the listener does not take SASL {}: it takes {}; set [pubsub.auth] mechanism to one of them",
            mechanism.name(),
            offered.join(", ")
        )),
        ILLEGAL_SASL_STATE => Err(
            "the listener speaks no SASL (ILLEGAL_SASL_STATE): point pubsub.address at the SASL_PLAINTEXT or SASL_SSL listener, or take [pubsub.auth] out".into(),
        ),
        code => Err(format!("its SASL handshake failed: {}", error_name(code))),
    }
}

/// One `SaslAuthenticate` v1 round: `bytes` sent, the server's answer returned; a refusal in
/// the broker's words.
fn authenticate(
    stream: &mut OpeningStream,
    bytes: &[u8],
    correlation: i32,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let start = begin(SASL_AUTHENTICATE, 1, correlation, &mut out);
    put_i32(bytes.len() as i32, &mut out);
    out.extend_from_slice(bytes);
    finish(start, &mut out);
    let body = call(stream, &out, correlation)?;
    let mut r = Reader::new(&body);
    let code = r.i16()?;
    let message = String::from_utf8_lossy(r.str()?).into_owned();
    if code != 0 {
        return Err(format!(
            "it refused the login ({}): {message}; check [pubsub.auth]'s user, mechanism and secret",
            error_name(code)
        ));
    }
    let n = r.i32()?;
    let answer = r.take(n.max(0) as usize)?.to_vec();
    Ok(answer)
}
