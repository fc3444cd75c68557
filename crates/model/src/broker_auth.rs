//! `[pubsub.auth]`: who msgbench is to a broker that asks (NATS's user and password or token,
//! Redis's `AUTH`, MQTT's username and password). Secrets come from an environment variable or
//! a file the scenario names, never from the scenario itself: a scenario is copied into every
//! result, and a secret must not be. They are read when the scenario is checked, held in a
//! [`Secret`] (whose `Debug` prints no character of it), and written only to the broker.
use crate::broker::Broker;
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};

/// The `[pubsub.auth]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSpec {
    /// The user (NATS user, Redis ACL user, MQTT username). Not a secret: it is written into
    /// results as the scenario is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The environment variable holding the password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// The file holding the password (its first line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// The environment variable holding a NATS token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// The file holding a NATS token (its first line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// The environment variable holding a NATS user's NKey seed (`SU…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nkey_seed_env: Option<String>,
    /// The file holding a NATS user's NKey seed (its first line), as `nk -gen user` writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nkey_seed_file: Option<String>,
    /// A NATS `.creds` file (the user's JWT and NKey seed, as `nsc` writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creds_file: Option<String>,
    /// Kafka's SASL mechanism: `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"` or `"PLAIN"` (one of the
    /// listener's `sasl.enabled.mechanisms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<String>,
    /// Refused: a secret written into the scenario (read here only to say so, without echoing
    /// it, rather than fail as an unknown key whose line the parser would quote).
    #[serde(skip_serializing)]
    #[schemars(skip)]
    pub password: Option<String>,
    /// Refused, as `password`.
    #[serde(skip_serializing)]
    #[schemars(skip)]
    pub token: Option<String>,
}

/// A secret read from the environment or a file: shown as `Secret(…)`, never as itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret the caller already holds (read by [`AuthSpec::validate`] otherwise).
    pub fn new(secret: String) -> Secret {
        Secret(secret)
    }

    /// The secret, for the one place that writes it: the broker's connection.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Validated credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The user, if any.
    pub user: Option<String>,
    /// The password, if any.
    pub password: Option<Secret>,
    /// A NATS token, if any.
    pub token: Option<Secret>,
    /// A NATS user's NKey seed, if any.
    pub nkey_seed: Option<Secret>,
    /// A NATS `.creds` file's text (a JWT and a seed), if any.
    pub creds: Option<Secret>,
    /// Kafka's SASL mechanism, if any.
    pub mechanism: Option<SaslMechanism>,
}

impl Credentials {
    /// How they log in, in a word (for the run's one-line description; never a secret).
    pub fn method(&self) -> String {
        match (&self.mechanism, &self.token, &self.nkey_seed, &self.creds) {
            (Some(m), ..) => format!("sasl-{}", m.name().to_ascii_lowercase()),
            (None, Some(_), ..) => "token".into(),
            (None, None, Some(_), _) => "nkey".into(),
            (None, None, None, Some(_)) => "creds".into(),
            _ => "password".into(),
        }
    }
}

/// A SASL mechanism Kafka's listeners take and msgbench speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// The user and password in clear (over TLS: `SASL_SSL`).
    Plain,
    /// SCRAM with SHA-256 (RFC 7677): the password never sent.
    ScramSha256,
    /// SCRAM with SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// Every one, as the scenario names them.
    pub const ALL: [SaslMechanism; 3] = [
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::Plain,
    ];

    /// Its name, as Kafka and the scenario spell it.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Longest secret or user name (MQTT's strings are at most 65 535 bytes; no broker needs more).
const MAX_SECRET: usize = 4096;

impl AuthSpec {
    /// Nothing given.
    pub fn is_empty(&self) -> bool {
        *self == AuthSpec::default()
    }

    /// The credentials for `broker` (`None`: the section is empty), each secret read.
    pub fn validate(
        &self,
        broker: Broker,
        invalid: &Invalid,
    ) -> Result<Option<Credentials>, ScenarioError> {
        self.validate_in("pubsub.auth", broker, invalid)
    }

    /// [`AuthSpec::validate`] for a section named `section` (`redis.auth`).
    pub fn validate_in(
        &self,
        section: &str,
        broker: Broker,
        invalid: &Invalid,
    ) -> Result<Option<Credentials>, ScenarioError> {
        if self.is_empty() {
            return Ok(None);
        }
        let key = |name: &str| format!("{section}.{name}");
        for (name, inline) in [("password", &self.password), ("token", &self.token)] {
            if inline.is_some() {
                return Err(invalid(
                    &key(name),
                    "is written in the scenario (its value is not repeated here)".into(),
                    &format!("a scenario is copied into every result: read the secret from a file or a variable, {name}_file = \"…\" or {name}_env = \"…\", and take it out of the file"),
                ));
            }
        }
        let password = secret(
            (&key("password_env"), &self.password_env),
            (&key("password_file"), &self.password_file),
            invalid,
        )?;
        let token = secret(
            (&key("token_env"), &self.token_env),
            (&key("token_file"), &self.token_file),
            invalid,
        )?;
        if let Some(user) = &self.user {
            if user.is_empty() || user.len() > MAX_SECRET || user.contains(['\r', '\n']) {
                return Err(invalid(
                    &key("user"),
                    format!("is {user:?}"),
                    "give a user name of one line, at most 4096 bytes",
                ));
            }
        }
        let mechanism = self.checked_mechanism(&key, invalid)?;
        let nkey_seed = secret(
            (&key("nkey_seed_env"), &self.nkey_seed_env),
            (&key("nkey_seed_file"), &self.nkey_seed_file),
            invalid,
        )?;
        self.check_seed(nkey_seed.as_ref(), &key, invalid)?;
        let creds = match &self.creds_file {
            Some(path) => Some(creds_file(&key("creds_file"), path, invalid)?),
            None => None,
        };
        let c = Credentials {
            user: self.user.clone(),
            password,
            token,
            nkey_seed,
            creds,
            mechanism,
        };
        check_for(section, broker, &c, invalid)?;
        Ok(Some(c))
    }

    /// `mechanism`, read (Kafka's SASL): `None` when not given.
    fn checked_mechanism(
        &self,
        key: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Option<SaslMechanism>, ScenarioError> {
        Ok(match &self.mechanism {
        None => None,
        Some(name) => Some(
            SaslMechanism::ALL
                .into_iter()
                .find(|m| m.name().eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    invalid(
                        &key("mechanism"),
                        format!("is {name:?}"),
                        "give \"SCRAM-SHA-256\", \"SCRAM-SHA-512\" or \"PLAIN\" (one the listener's sasl.enabled.mechanisms has)",
                    )
                })?,
        ),
    })
    }

    /// An NKey seed is a user's seed (`SU…`), not a public key: refused at check, without its
    /// text.
    fn check_seed(
        &self,
        nkey_seed: Option<&Secret>,
        key: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if let Some(seed) = nkey_seed {
            let text = seed.expose().trim();
            let key_name = key(if self.nkey_seed_file.is_some() {
                "nkey_seed_file"
            } else {
                "nkey_seed_env"
            });
            if !text.starts_with("SU") {
                let what = match text.as_bytes().first() {
                    Some(b'U' | b'A' | b'O' | b'N') => "a public key, not a seed",
                    _ => "not a user's NKey seed",
                };
                return Err(invalid(
                &key_name,
                format!("holds {what} (its text is not repeated here)"),
                "give the user's seed, the line beginning SU that `nk -gen user` or nsc wrote (the public key, U…, goes in the server's configuration)",
            ));
            }
        }
        Ok(())
    }
}

/// What `broker` takes: NATS a user and password or a token; Redis a password (and a user);
/// MQTT a username (and a password); Kafka a user and password and its SASL mechanism; RabbitMQ
/// a user and password. Only Kafka takes a mechanism.
fn check_for(
    section: &str,
    broker: Broker,
    c: &Credentials,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    let refuse = |problem: &str, fix: &str| Err(invalid(section, problem.into(), fix));
    let (user, password, token) = (c.user.is_some(), c.password.is_some(), c.token.is_some());
    if c.mechanism.is_some() && broker != Broker::Kafka {
        return refuse(
            "gives a SASL mechanism to a broker other than Kafka",
            "take `mechanism` out: only Kafka's login has one",
        );
    }
    let signed = c.nkey_seed.is_some() as u8 + c.creds.is_some() as u8;
    if signed > 0 {
        return match broker {
            Broker::Nats | Broker::Jetstream if signed == 1 && !(user || password || token) => {
                Ok(())
            }
            Broker::Nats | Broker::Jetstream => refuse(
                "gives an NKey seed or a creds file with other credentials",
                "NATS takes one login: an NKey seed (nkey_seed_file or nkey_seed_env), a creds file, a token, or a user with a password",
            ),
            _ => refuse(
                "gives an NKey seed or a creds file to a broker other than NATS",
                "NKeys and .creds files are NATS's: take them out",
            ),
        };
    }
    check_login(broker, (user, password, token), c.mechanism, &refuse)
}

/// [`check_for`] of a login without a key: what `broker` takes of a user, a password, a
/// token and a SASL mechanism.
fn check_login(
    broker: Broker,
    (user, password, token): (bool, bool, bool),
    mechanism: Option<SaslMechanism>,
    refuse: &dyn Fn(&str, &str) -> Result<(), ScenarioError>,
) -> Result<(), ScenarioError> {
    match broker {
        Broker::Nats | Broker::Jetstream => match (user, password, token) {
            (_, _, true) if user || password => refuse(
                "gives a token and a user or password",
                "NATS takes one of them: a token (token_env or token_file), or a user with a password",
            ),
            (true, false, false) | (false, true, false) => refuse(
                "gives a user without a password, or a password without a user",
                "NATS takes a user with its password (password_env or password_file), or a token",
            ),
            _ => Ok(()),
        },
        Broker::Redis | Broker::RedisStreams => match (password, token) {
            (_, true) => refuse(
                "gives a token to Redis",
                "Redis takes a password (password_env or password_file), and a user for an ACL user",
            ),
            (false, _) => refuse(
                "gives no password to Redis",
                "give password_env or password_file (and user for an ACL user; without it Redis's `default` user)",
            ),
            _ => Ok(()),
        },
        Broker::Mqtt | Broker::Mqtt5 => match (user, token) {
            (_, true) => refuse(
                "gives a token to MQTT",
                "MQTT takes a username (user) and a password (password_env or password_file)",
            ),
            (false, _) => refuse(
                "gives a password to MQTT without a user",
                "MQTT sends a password only with a username: give user too",
            ),
            _ => Ok(()),
        },
        Broker::Kafka => match (user && password && !token, mechanism) {
            (false, _) => refuse(
                "does not give Kafka a user and a password (and no token)",
                "Kafka's SASL takes user = \"…\" and password_env or password_file",
            ),
            (true, None) => refuse(
                "gives Kafka no SASL mechanism",
                "give mechanism = \"SCRAM-SHA-256\", \"SCRAM-SHA-512\" or \"PLAIN\" (one the listener's sasl.enabled.mechanisms has)",
            ),
            (true, Some(_)) => Ok(()),
        },
        Broker::Rabbitmq => match (user && password, token) {
            (_, true) => refuse(
                "gives a token to RabbitMQ",
                "RabbitMQ's login (SASL PLAIN) takes user = \"…\" and password_env or password_file",
            ),
            (false, _) => refuse(
                "does not give RabbitMQ a user and a password",
                "RabbitMQ's login (SASL PLAIN) takes user = \"…\" and password_env or password_file (without [pubsub.auth]: guest/guest, which RabbitMQ takes from loopback only)",
            ),
            _ => Ok(()),
        },
    }
}

/// Longest `.creds` file read (`nsc` writes about 1.5 KB).
const MAX_CREDS: u64 = 64 * 1024;

/// The text of the `.creds` file at `path`, read now (bounded).
fn creds_file(key: &str, path: &str, invalid: &Invalid) -> Result<Secret, ScenarioError> {
    let unreadable = |why: String| {
        invalid(
            key,
            format!("names {path}, which {why}"),
            "name the .creds file nsc wrote for the user (paths are from where msgbench runs)",
        )
    };
    let size = std::fs::metadata(path)
        .map_err(|e| unreadable(format!("cannot be read ({e})")))?
        .len();
    if size > MAX_CREDS {
        return Err(unreadable(format!("is {size} bytes, over 64 KiB")));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| unreadable(format!("cannot be read ({e})")))?;
    Ok(Secret(text))
}

/// The secret named by an environment variable or a file (one of them), read now.
fn secret(
    (env_key, env): (&str, &Option<String>),
    (file_key, file): (&str, &Option<String>),
    invalid: &Invalid,
) -> Result<Option<Secret>, ScenarioError> {
    let (key, text) = match (env, file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                env_key,
                format!("is given, and so is {file_key}"),
                "name one place the secret is read from",
            ))
        }
        (Some(name), None) => match std::env::var(name) {
            Ok(v) => (env_key, v),
            Err(_) => {
                return Err(invalid(
                    env_key,
                    format!("names {name}, which is not set (or not UTF-8)"),
                    &format!("export {name} before running, or name another variable"),
                ))
            }
        },
        (None, Some(path)) => match std::fs::read_to_string(path) {
            // The first line: a file written with `echo` ends with a newline.
            Ok(v) => (file_key, v.lines().next().unwrap_or("").to_string()),
            Err(e) => {
                return Err(invalid(
                    file_key,
                    format!("names {path}, which cannot be read ({e})"),
                    "name a readable file holding the secret on its first line (paths are from where msgbench runs)",
                ))
            }
        },
        (None, None) => return Ok(None),
    };
    if text.is_empty() || text.len() > MAX_SECRET || text.contains(['\r', '\n', '\0']) {
        // The secret itself is never said: only its length.
        return Err(invalid(
            key,
            format!(
                "gives a secret of {} bytes, empty, too long or with a line break",
                text.len()
            ),
            "give a secret of one line, 1 to 4096 bytes",
        ));
    }
    Ok(Some(Secret(text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(field: &str, problem: String, fix: &str) -> ScenarioError {
        ScenarioError::Invalid {
            source_name: "test".into(),
            field: field.into(),
            problem,
            fix: fix.into(),
        }
    }

    #[test]
    fn a_secret_is_never_shown() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?}"), "Secret(…)");
        let c = Credentials {
            user: Some("u".into()),
            password: Some(s),
            ..Credentials::default()
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn secrets_come_from_a_file_or_the_environment() {
        let dir = std::env::temp_dir().join(format!("msgbench-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pass");
        std::fs::write(&file, "s3cret\n").unwrap();
        let spec = AuthSpec {
            user: Some("bench".into()),
            password_file: Some(file.display().to_string()),
            ..AuthSpec::default()
        };
        let c = spec.validate(Broker::Nats, &invalid).unwrap().unwrap();
        assert_eq!(c.password.unwrap().expose(), "s3cret");
        let missing = AuthSpec {
            token_env: Some("MSGBENCH_TEST_NO_SUCH_VARIABLE".into()),
            ..AuthSpec::default()
        };
        let e = missing.validate(Broker::Nats, &invalid).unwrap_err();
        assert!(e.to_string().contains("not set"), "{e}");
        // A public key where the seed goes is refused at check, not repeated.
        let key_file = dir.join("user.pub");
        std::fs::write(
            &key_file,
            "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4\n",
        )
        .unwrap();
        let public = AuthSpec {
            nkey_seed_file: Some(key_file.display().to_string()),
            ..AuthSpec::default()
        };
        let e = public
            .validate(Broker::Nats, &invalid)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a public key, not a seed") && !e.contains("UDXU4"),
            "{e}"
        );
        // Kafka needs its mechanism; a mechanism is Kafka's only.
        let e = spec.validate(Broker::Kafka, &invalid).unwrap_err();
        assert!(e.to_string().contains("SCRAM-SHA-256"), "{e}");
        let scram = AuthSpec {
            mechanism: Some("scram-sha-512".into()),
            ..spec.clone()
        };
        let c = scram.validate(Broker::Kafka, &invalid).unwrap().unwrap();
        assert_eq!(c.mechanism, Some(SaslMechanism::ScramSha512));
        assert!(scram.validate(Broker::Nats, &invalid).is_err());
        // A secret written into the scenario is refused, and not repeated.
        let inline = AuthSpec {
            user: Some("bench".into()),
            password: Some("hunter2".into()),
            ..AuthSpec::default()
        };
        let e = inline
            .validate(Broker::Nats, &invalid)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pubsub.auth.password") && !e.contains("hunter2"),
            "{e}"
        );
        // Redis needs a password; a user alone is refused.
        let user_only = AuthSpec {
            user: Some("bench".into()),
            ..AuthSpec::default()
        };
        assert!(user_only.validate(Broker::Redis, &invalid).is_err());
        assert!(user_only.validate(Broker::Mqtt, &invalid).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
