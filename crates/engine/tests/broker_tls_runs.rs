//! Brokers over TLS (`[pubsub.tls]`), with authentication on: nats-server (TLS after its
//! plaintext INFO, and mutual TLS), redis-server on a TLS-only port (Pub/Sub and Streams, with
//! `requirepass`), Mosquitto on a TLS listener with a password file. Each runs with the test
//! CA (every message accounted for, the handshakes reported apart, no secret in any file the
//! run wrote), and is refused in one clear message with a CA that did not sign the broker's
//! certificate, without TLS on a TLS port, and with TLS on a plain one.
mod common;

use common::{assert_subscriptions_accounted, certificates, try_run, BrokerProcess};
use std::path::Path;

/// The secret every broker here is given: searched for in every file a run writes.
const SECRET: &str = "Tq9-never-in-results";

/// A pub/sub scenario for `broker` at `addr`, its `[pubsub.*]` sections from `sections`.
fn scenario(broker: &str, addr: std::net::SocketAddr, sections: &str) -> String {
    format!(
        "name = \"tls\"\nsystem = \"pubsub\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\ndrain_timeout = \"2s\"\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[pubsub]\nbroker = \"{broker}\"\naddress = \"{addr}\"\nsubscriptions_per_topic = 2\n{sections}\n"
    )
}

/// `[pubsub.tls]` with the CA of `dir`, and the client certificate when `mutual`.
fn tls(dir: &Path, mutual: bool) -> String {
    let mut s = format!(
        "[pubsub.tls]\nca_file = \"{}\"\n",
        dir.join("ca.pem").display()
    );
    if mutual {
        s += &format!(
            "cert_file = \"{}\"\nkey_file = \"{}\"\n",
            dir.join("cert.pem").display(),
            dir.join("key.pem").display()
        );
    }
    s
}

/// `[pubsub.auth]` reading `SECRET` from a file in `dir`, with `user` when given.
fn auth(dir: &Path, user: Option<&str>) -> String {
    let path = dir.join("secret");
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    let user = user.map_or(String::new(), |u| format!("user = \"{u}\"\n"));
    format!(
        "[pubsub.auth]\n{user}password_file = \"{}\"\n",
        path.display()
    )
}

/// Runs `toml`: measured, every subscription accounted for, its handshakes reported, no
/// secret in what it wrote.
fn runs_with(toml: &str) {
    let (outcome, dir) = try_run(toml, &[]);
    let outcome = outcome.unwrap_or_else(|e| panic!("{e}"));
    let r = &outcome.results[0];
    assert_subscriptions_accounted(r);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    assert!(
        r.info
            .iter()
            .any(|i| i.starts_with("TLS to the broker") && !i.contains(": 0 handshakes")),
        "{:?}",
        r.info
    );
    // Counted in the result's figures too, one per connection of the opening.
    let handshakes = r.faults.connections.tls_handshakes;
    assert!(handshakes >= 3, "{:?}", r.faults.connections);
    common::assert_not_written(dir.path(), SECRET);
}

/// Runs `toml` (no TLS): measured, every subscription accounted for, no secret written.
fn runs_without_tls(toml: &str) {
    let (outcome, dir) = try_run(toml, &[]);
    let outcome = outcome.unwrap_or_else(|e| panic!("{e}"));
    let r = &outcome.results[0];
    assert_subscriptions_accounted(r);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    common::assert_not_written(dir.path(), SECRET);
}

/// Runs `toml`: refused with each of `words` in the message.
fn refused_with(toml: &str, words: &[&str]) {
    let (outcome, _dir) = try_run(toml, &[]);
    let e = outcome.map(|_| ()).expect_err("refused").to_string();
    eprintln!("refused: {e}");
    for w in words {
        assert!(e.contains(w), "{w:?} not in: {e}");
    }
    assert!(!e.contains(SECRET), "{e}");
}

/// Two CAs: the broker's (`ca`), and one that signed nothing the broker shows (`other`).
fn two_cas() -> (tempfile::TempDir, tempfile::TempDir) {
    let (ca, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    certificates(ca.path());
    certificates(other.path());
    (ca, other)
}

#[test]
fn nats_upgrades_to_tls_after_its_info_with_a_password_and_with_a_client_certificate() {
    let (ca, other) = two_cas();
    let file = |name: &str| ca.path().join(name).display().to_string();
    let (cert, key) = (file("cert.pem"), file("key.pem"));
    let nats = BrokerProcess::nats(&[
        "--tls",
        "--tlscert",
        &cert,
        "--tlskey",
        &key,
        "--user",
        "bench",
        "--pass",
        SECRET,
    ]);
    let login = auth(ca.path(), Some("bench"));
    runs_with(&scenario(
        "nats",
        nats.addr,
        &(tls(ca.path(), false) + &login),
    ));
    refused_with(
        &scenario("nats", nats.addr, &(tls(other.path(), false) + &login)),
        &["certificate", "pubsub.tls.ca_file"],
    );
    // A plain client: the broker asks for TLS, and the fix is named.
    refused_with(
        &scenario("nats", nats.addr, &login),
        &["requires TLS", "give [pubsub.tls]"],
    );
    // TLS asked of a broker that offers none: said before any handshake.
    let plain = BrokerProcess::nats(&[]);
    refused_with(
        &scenario("nats", plain.addr, &tls(ca.path(), false)),
        &["offers no TLS"],
    );
    // Insecure: runs, and says the broker was not authenticated.
    let (outcome, _dir) = try_run(
        &scenario(
            "nats",
            nats.addr,
            &("[pubsub.tls]\ninsecure = true\n".to_string() + &login),
        ),
        &[],
    );
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    assert_subscriptions_accounted(r);
    assert!(
        r.info.iter().any(|i| i.contains("not verified")),
        "{:?}",
        r.info
    );
    // Mutual TLS: the client's certificate, signed by the CA the broker verifies with.
    let mutual = BrokerProcess::nats(&[
        "--tlsverify",
        "--tlscert",
        &cert,
        "--tlskey",
        &key,
        "--tlscacert",
        &file("ca.pem"),
    ]);
    runs_with(&scenario("nats", mutual.addr, &tls(ca.path(), true)));
    refused_with(
        &scenario("nats", mutual.addr, &tls(ca.path(), false)),
        &["client certificate", "cert_file"],
    );
}

#[test]
fn jetstream_runs_over_tls() {
    let ca = tempfile::tempdir().unwrap();
    certificates(ca.path());
    let file = |name: &str| ca.path().join(name).display().to_string();
    let store = tempfile::tempdir().unwrap();
    let nats = BrokerProcess::nats(&[
        "-js",
        "-sd",
        &store.path().display().to_string(),
        "--tls",
        "--tlscert",
        &file("cert.pem"),
        "--tlskey",
        &file("key.pem"),
    ]);
    runs_with(&scenario("jetstream", nats.addr, &tls(ca.path(), false)));
}

#[test]
fn redis_on_a_tls_port_with_a_password_and_with_client_certificates() {
    let (ca, other) = two_cas();
    let redis = BrokerProcess::redis_tls(ca.path(), false, &["--requirepass", SECRET]);
    let login = auth(ca.path(), None);
    for broker in ["redis", "redis-streams"] {
        runs_with(&scenario(
            broker,
            redis.addr,
            &(tls(ca.path(), false) + &login),
        ));
        refused_with(
            &scenario(broker, redis.addr, &(tls(other.path(), false) + &login)),
            &["certificate", "pubsub.tls.ca_file"],
        );
    }
    let mutual = BrokerProcess::redis_tls(ca.path(), true, &[]);
    runs_with(&scenario("redis", mutual.addr, &tls(ca.path(), true)));
    for broker in ["redis", "redis-streams"] {
        // A plain client on the TLS port: Redis hangs up; the message names TLS.
        refused_with(
            &scenario(broker, redis.addr, &login),
            &[
                "closed the connection",
                "a TLS port: then give [pubsub.tls]",
            ],
        );
        refused_with(
            &scenario(broker, mutual.addr, &tls(ca.path(), false)),
            &["cert_file"],
        );
    }
    // TLS toward a plain Redis: the fix is to take the section out.
    let plain = BrokerProcess::redis(&[]);
    refused_with(
        &scenario("redis", plain.addr, &tls(ca.path(), false)),
        &["TLS handshake", "take [pubsub.tls] out"],
    );
}

/// Messages of 32 KiB over TLS fill the sockets and split into many records: every one is
/// delivered to both subscriptions (nothing left in a session at the run's end).
#[test]
fn large_messages_over_tls_are_all_delivered() {
    let ca = tempfile::tempdir().unwrap();
    certificates(ca.path());
    let file = |name: &str| ca.path().join(name).display().to_string();
    let nats = BrokerProcess::nats(&[
        "--tls",
        "--tlscert",
        &file("cert.pem"),
        "--tlskey",
        &file("key.pem"),
    ]);
    let toml = scenario("nats", nats.addr, &tls(ca.path(), false))
        .replace("per_sec = 2000", "per_sec = 1500")
        .replace("[pubsub]\n", "[pubsub]\nmessage_bytes = 32768\n");
    let (outcome, _dir) = try_run(&toml, &[]);
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    assert_subscriptions_accounted(r);
    assert_eq!(
        r.counters.dropped + r.counters.failed,
        0,
        "{:?}",
        r.counters
    );
    for s in &r.streams {
        assert_eq!(
            s.counters.delivered, s.counters.sent,
            "{}: {:?}",
            s.name, s.counters
        );
    }
}

/// A server whose INFO says `tls_required` hears nothing from a scenario without
/// `[pubsub.tls]`: the refusal comes before the CONNECT (and its password) would go out.
#[test]
fn nothing_is_sent_to_a_broker_that_requires_tls_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heard = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(b"INFO {\"server_id\":\"x\",\"tls_required\":true}\r\n")
            .unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    });
    refused_with(
        &scenario("nats", addr, &auth(dir.path(), Some("bench"))),
        &["requires TLS", "give [pubsub.tls]"],
    );
    assert_eq!(heard.join().unwrap(), b"", "the client spoke before TLS");
}

#[test]
fn mosquitto_on_a_tls_listener_with_a_username_and_password() {
    let (ca, other) = two_cas();
    let passwords = ca.path().join("passwords");
    let made = std::process::Command::new("mosquitto_passwd")
        .args(["-b", "-c", passwords.to_str().unwrap(), "bench", SECRET])
        .status()
        .expect("mosquitto_passwd (run `bash scripts/setup.sh`)");
    assert!(made.success());
    let file = |name: &str| ca.path().join(name).display().to_string();
    let mosquitto = BrokerProcess::mosquitto_with(&format!(
        "certfile {}\nkeyfile {}\nallow_anonymous false\npassword_file {}",
        file("cert.pem"),
        file("key.pem"),
        passwords.display()
    ));
    let login = auth(ca.path(), Some("bench"));
    for broker in ["mqtt", "mqtt5"] {
        runs_with(&scenario(
            broker,
            mosquitto.addr,
            &(tls(ca.path(), false) + &login),
        ));
        refused_with(
            &scenario(broker, mosquitto.addr, &(tls(other.path(), false) + &login)),
            &["certificate", "pubsub.tls.ca_file"],
        );
    }
    refused_with(
        &scenario("mqtt", mosquitto.addr, &login),
        &[
            "closed the connection",
            "a TLS port: then give [pubsub.tls]",
        ],
    );
}

/// The `redis` request/response system over TLS, logging in on every connection after its
/// handshake: each handshake timed apart from the requests, a wrong CA refused.
#[test]
fn the_redis_system_speaks_tls_and_logs_in() {
    let (ca, other) = two_cas();
    let redis = BrokerProcess::redis_tls(ca.path(), false, &["--requirepass", SECRET]);
    let toml = |ca: &Path| {
        let secret = ca.join("secret");
        std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
        format!(
            "name = \"tls\"\nsystem = \"redis\"\n[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[client]\nconnections = 2\n[pacing]\nmode = \"rate\"\nper_sec = 2000\n[redis]\naddress = \"{}\"\n[redis.auth]\npassword_file = \"{}\"\n[redis.tls]\nca_file = \"{}\"\n",
            redis.addr,
            secret.display(),
            ca.join("ca.pem").display()
        )
    };
    let (outcome, out) = try_run(&toml(ca.path()), &[]);
    let r = &outcome.unwrap_or_else(|e| panic!("{e}")).results[0];
    common::assert_accounted(r);
    assert_eq!(r.counters.failed, 0, "{:?}", r.faults);
    assert!(r.counters.delivered > 500, "{:?}", r.counters);
    // Each connection's handshake counted apart from its requests.
    assert_eq!(r.faults.connections.tls_handshakes, 2, "{:?}", r.faults);
    common::assert_not_written(out.path(), SECRET);
    refused_with(&toml(other.path()), &["certificate", "redis.tls.ca_file"]);
}

/// Kafka on a SASL_SSL listener (`scripts/kafka-broker.sh` with `SASL_SSL_PORT`): SCRAM-SHA-256,
/// SCRAM-SHA-512 and PLAIN each log every connection in (publishers, the consumer groups'
/// coordinators and members) after its TLS handshake; a wrong password, a wrong CA, no login,
/// and a plain client on the TLS port are each refused in one message naming the fix.
#[test]
fn kafka_over_sasl_ssl_with_scram_and_plain() {
    let (ca, other) = two_cas();
    let password = ca.path().join("secret");
    std::fs::write(&password, format!("{SECRET}\n")).unwrap();
    let kafka = common::SecureKafka::start(ca.path(), &password);
    let login = |mechanism: &str| {
        format!(
            "[pubsub.auth]\nuser = \"bench\"\npassword_file = \"{}\"\nmechanism = \"{mechanism}\"\n",
            password.display()
        )
    };
    let kafka_run = |sections: &str, topic: &str| {
        scenario("kafka", kafka.addr, sections).replace(
            "subscriptions_per_topic = 2\n",
            &format!("subscriptions_per_topic = 2\ntopic_prefix = \"{topic}\"\n"),
        )
    };
    for (i, mechanism) in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
        .iter()
        .enumerate()
    {
        let sections = tls(ca.path(), false) + &login(mechanism);
        runs_with(&kafka_run(&sections, &format!("sasl{i}")));
    }
    let wrong = ca.path().join("wrong");
    std::fs::write(&wrong, "nope\n").unwrap();
    let wrong_login = login("SCRAM-SHA-256").replace(
        &password.display().to_string(),
        &wrong.display().to_string(),
    );
    refused_with(
        &kafka_run(&(tls(ca.path(), false) + &wrong_login), "bad"),
        &["SASL_AUTHENTICATION_FAILED", "check [pubsub.auth]"],
    );
    refused_with(
        &kafka_run(&(tls(other.path(), false) + &login("PLAIN")), "bad"),
        &["certificate", "pubsub.tls.ca_file"],
    );
    refused_with(
        &kafka_run(&tls(ca.path(), false), "bad"),
        &["has not logged in", "give [pubsub.auth]"],
    );
    refused_with(
        &kafka_run(&login("PLAIN"), "bad"),
        &["answered in TLS", "give [pubsub.tls]"],
    );
    // SASL_PLAINTEXT: the same logins without TLS.
    let sasl_plain = scenario("kafka", kafka.sasl_plain, &login("SCRAM-SHA-512"))
        .replace("[pubsub]\n", "[pubsub]\ntopic_prefix = \"saslplain\"\n");
    runs_without_tls(&sasl_plain);
    // SASL toward the broker's PLAINTEXT listener: it speaks none.
    let plain = scenario("kafka", kafka.plain, &login("SCRAM-SHA-512"));
    refused_with(&plain, &["speaks no SASL"]);
}
