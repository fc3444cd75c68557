//! Brokers that ask who is connecting (`[pubsub.auth]`): nats-server with a user and password
//! and with a token, redis-server with `requirepass`, Mosquitto with a password file — each
//! run with the right secret (every message accounted for) and with a wrong one (one clear
//! error, the broker's words, nothing measured), and no secret in any file a run wrote.
mod common;

use common::{assert_subscriptions_accounted, try_run, BrokerProcess};
use std::path::Path;

/// The secret every broker here is given: searched for in every file a run writes.
const SECRET: &str = "Zq7-never-in-results";

fn scenario(broker: &str, addr: std::net::SocketAddr, auth: &str) -> String {
    format!(
        "name = \"auth\"\nsystem = \"pubsub\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\ndrain_timeout = \"2s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[pubsub]\nbroker = \"{broker}\"\naddress = \"{addr}\"\n[pubsub.auth]\n{auth}\n"
    )
}

/// A file holding `secret` (and a newline, as `echo` writes it).
fn secret_file(dir: &Path, secret: &str) -> String {
    let path = dir.join(format!("secret-{}", secret.len()));
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path.display().to_string()
}

/// Runs `toml`: measured, every subscription accounted for, no secret written.
fn runs_with(toml: &str) {
    let (outcome, dir) = try_run(toml, &[]);
    let outcome = outcome.unwrap_or_else(|e| panic!("{e}"));
    let r = &outcome.results[0];
    assert_subscriptions_accounted(r);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    common::assert_not_written(dir.path(), SECRET);
}

/// Runs `toml`: refused with `words` in the message, which never holds the secret.
fn refused_with(toml: &str, words: &str) {
    let (outcome, _dir) = try_run(toml, &[]);
    let e = outcome.map(|_| ()).expect_err("refused").to_string();
    assert!(e.contains(words), "{e}");
    assert!(!e.contains(SECRET), "{e}");
}

#[test]
fn nats_takes_a_user_and_password_or_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (
        secret_file(dir.path(), SECRET),
        secret_file(dir.path(), "nope"),
    );
    let nats = BrokerProcess::nats(&["--user", "bench", "--pass", SECRET]);
    let login = |file: &str| format!("user = \"bench\"\npassword_file = \"{file}\"");
    runs_with(&scenario("nats", nats.addr, &login(&right)));
    refused_with(
        &scenario("nats", nats.addr, &login(&wrong)),
        "Authorization Violation",
    );
    // No credentials at all: the broker's refusal, said as such.
    let bare = scenario("nats", nats.addr, "").replace("[pubsub.auth]\n", "");
    refused_with(&bare, "Authorization Violation");
    // The login is refused, not the subscription sent after it; and the fix is named.
    refused_with(&bare, "refused the connection");
    refused_with(&bare, "give [pubsub.auth]");
    let nats = BrokerProcess::nats(&["--auth", SECRET]);
    runs_with(&scenario(
        "nats",
        nats.addr,
        &format!("token_file = \"{right}\""),
    ));
    refused_with(
        &scenario("nats", nats.addr, &format!("token_file = \"{wrong}\"")),
        "Authorization Violation",
    );
}

#[test]
fn redis_takes_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (
        secret_file(dir.path(), SECRET),
        secret_file(dir.path(), "nope"),
    );
    let redis = BrokerProcess::redis(&["--requirepass", SECRET]);
    for broker in ["redis", "redis-streams"] {
        let login = |file: &str| format!("password_file = \"{file}\"");
        runs_with(&scenario(broker, redis.addr, &login(&right)));
        refused_with(&scenario(broker, redis.addr, &login(&wrong)), "WRONGPASS");
    }
}

#[test]
fn mosquitto_takes_a_username_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (
        secret_file(dir.path(), SECRET),
        secret_file(dir.path(), "nope"),
    );
    let passwords = dir.path().join("passwords");
    let made = std::process::Command::new("mosquitto_passwd")
        .args(["-b", "-c", passwords.to_str().unwrap(), "bench", SECRET])
        .status()
        .expect("mosquitto_passwd (run `bash scripts/setup.sh`)");
    assert!(made.success());
    let mosquitto = BrokerProcess::mosquitto_with(&format!(
        "allow_anonymous false\npassword_file {}",
        passwords.display()
    ));
    for broker in ["mqtt", "mqtt5"] {
        let login = |file: &str| format!("user = \"bench\"\npassword_file = \"{file}\"");
        runs_with(&scenario(broker, mosquitto.addr, &login(&right)));
        // Mosquitto answers a wrong password "not authorized" (MQTT 3.1.1's code 5, 5's 0x87).
        refused_with(
            &scenario(broker, mosquitto.addr, &login(&wrong)),
            "not authorized",
        );
    }
}

/// The `redis` request/response system logs in on every connection before its first command
/// (outside any latency): the right password runs, a wrong one fails the run at its first
/// connection in Redis's words.
#[test]
fn the_redis_system_logs_in_before_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (
        secret_file(dir.path(), SECRET),
        secret_file(dir.path(), "nope"),
    );
    let redis = BrokerProcess::redis(&["--requirepass", SECRET]);
    let toml = |file: &str| {
        format!(
            "name = \"auth\"\nsystem = \"redis\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[client]\nconnections = 2\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[redis]\naddress = \"{}\"\n[redis.auth]\npassword_file = \"{file}\"\n",
            redis.addr
        )
    };
    let (outcome, out) = try_run(&toml(&right), &[]);
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    common::assert_not_written(out.path(), SECRET);
    refused_with(&toml(&wrong), "WRONGPASS");
    // Without a login, every command is refused: NOAUTH, counted as failed.
    let bare = toml(&right).replace(&format!("[redis.auth]\npassword_file = \"{right}\"\n"), "");
    let (outcome, _out) = try_run(&bare, &[]);
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    assert_eq!(r.counters.delivered, 0, "{:?}", r.counters);
    assert!(
        r.faults.errors.iter().any(|e| e.message.contains("NOAUTH")),
        "{:?}",
        r.faults.errors
    );
}

/// A NATS user known by its NKey: the seed (from a file) signs the nonce of the server's INFO;
/// a seed of another user is refused in the server's words, a broken seed before anything is
/// sent, and the seed is in no file the run wrote.
#[test]
fn nats_takes_an_nkey_seed() {
    let dir = tempfile::tempdir().unwrap();
    let seed = msgbench_engine::net::nkey::encode_seed(&[11u8; 32]);
    let public = msgbench_engine::net::nkey::NKey::from_seed(&seed)
        .unwrap()
        .public()
        .to_string();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        format!("authorization {{ users = [ {{ nkey: \"{public}\" }} ] }}\n"),
    )
    .unwrap();
    let nats = BrokerProcess::nats(&["-c", conf.to_str().unwrap()]);
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path.display().to_string()
    };
    let right = file("secret-user.nk", &seed);
    let (outcome, out) = try_run(
        &scenario("nats", nats.addr, &format!("nkey_seed_file = \"{right}\"")),
        &[],
    );
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    assert_subscriptions_accounted(r);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    assert!(
        r.info
            .iter()
            .any(|i| i.contains("logged in to the broker with an NKey")),
        "{:?}",
        r.info
    );
    common::assert_not_written(out.path(), &seed);
    // Another user's seed: the server's refusal.
    let other = file(
        "secret-other.nk",
        &msgbench_engine::net::nkey::encode_seed(&[12u8; 32]),
    );
    refused_with(
        &scenario("nats", nats.addr, &format!("nkey_seed_file = \"{other}\"")),
        "Authorization Violation",
    );
    // A seed with a character changed: its checksum says so before the login, without its
    // text. (A public key in its place is refused when the scenario is checked: the model's
    // tests.)
    let mut changed = seed.clone().into_bytes();
    changed[20] = if changed[20] == b'A' { b'B' } else { b'A' };
    let broken = file("secret-broken.nk", std::str::from_utf8(&changed).unwrap());
    refused_with(
        &scenario("nats", nats.addr, &format!("nkey_seed_file = \"{broken}\"")),
        "fails its checksum",
    );
}

/// A JWT of `claims` (its `nats` member), issued by `issuer` for `subject`, as `nsc` signs
/// them (Ed25519 over `header.claims`, base64url without padding).
fn jwt(
    issuer: &msgbench_engine::net::nkey::NKey,
    subject: &str,
    name: &str,
    nats: serde_json::Value,
) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({
        "jti": format!("MSGBENCH{}", name.to_uppercase()),
        "iat": iat,
        "iss": issuer.public(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let input = format!("{header}.{}", b64(claims.to_string().as_bytes()));
    let sig = issuer.sign(input.as_bytes());
    format!("{input}.{sig}")
}

/// A nats-server in operator mode (an operator, an account it signed, preloaded in a memory
/// resolver) takes a user's `.creds` file — its JWT, signed by the account, and its seed
/// signing the INFO's nonce; a user of another account is refused in the server's words.
#[test]
fn nats_takes_a_creds_file_in_operator_mode() {
    use msgbench_engine::net::nkey::{encode_seed_of, Kind, NKey};
    let dir = tempfile::tempdir().unwrap();
    let key = |kind, byte: u8| NKey::of_kind(&encode_seed_of(kind, &[byte; 32])).unwrap().0;
    let (operator, account, stranger) = (
        key(Kind::Operator, 1),
        key(Kind::Account, 2),
        key(Kind::Account, 3),
    );
    let user_seed = encode_seed_of(Kind::User, &[4; 32]);
    let user = NKey::from_seed(&user_seed).unwrap();
    let operator_jwt = jwt(
        &operator,
        operator.public(),
        "op",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let account_jwt = jwt(
        &operator,
        account.public(),
        "acc",
        serde_json::json!({
            "limits": {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                       "wildcards": true, "conn": -1, "leaf": -1},
            "default_permissions": {"pub": {}, "sub": {}},
            "type": "account", "version": 2
        }),
    );
    let op_file = dir.path().join("op.jwt");
    std::fs::write(&op_file, &operator_jwt).unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "operator: \"{}\"\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{account_jwt}\"\n}}\n",
            op_file.display(),
            account.public()
        ),
    )
    .unwrap();
    let nats = BrokerProcess::nats(&["-c", conf.to_str().unwrap()]);
    let user_claims = serde_json::json!({
        "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
        "type": "user", "version": 2
    });
    let creds = |signer: &NKey, name: &str| {
        let token = jwt(signer, user.public(), "bench", user_claims.clone());
        let path = dir.path().join(format!("secret-{name}.creds"));
        std::fs::write(
            &path,
            format!(
                "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\nNKEYs are sensitive and should be treated as secrets.\n\n-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n\n*************************************************************\n"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let right = creds(&account, "right");
    let (outcome, out) = try_run(
        &scenario("nats", nats.addr, &format!("creds_file = \"{right}\"")),
        &[],
    );
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    assert_subscriptions_accounted(r);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    common::assert_not_written(out.path(), &user_seed);
    // Signed by an account the server does not know: refused.
    let wrong = creds(&stranger, "stranger");
    refused_with(
        &scenario("nats", nats.addr, &format!("creds_file = \"{wrong}\"")),
        "Authorization Violation",
    );
}
