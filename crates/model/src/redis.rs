//! The `[redis]` section: the address, the command mix and the key space
//! ([`RedisSpec`] → [`RedisConfig`]). A command is `ping`, `get`, `set`, or any command as its
//! arguments with placeholders, as memtier's `--command`: `["HSET", "user:{key}", "name",
//! "{data}"]`, where `{key}` is a key number drawn from the key space and `{data}` a value of
//! `value_bytes` bytes.
use crate::check::{check_endpoint, shares, Invalid, ScenarioError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `[redis]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSpec {
    /// `host:port` of the Redis server.
    pub address: String,
    /// Keys are `key:000000000000` … `key:<keys−1>` (`{key}` is the 12 digits), picked by
    /// `key_pattern` (`redis-benchmark -r`); 0 uses the single key `key:__rand_int__` as
    /// `redis-benchmark` does without `-r`.
    pub keys: u64,
    /// How keys are picked: `uniform`, `sequential` (0, 1, 2, … per connection, wrapping) or
    /// `zipf` (key k with probability ∝ 1/(k+1)^zipf_exponent: a few hot keys).
    pub key_pattern: KeyPattern,
    /// The exponent of `zipf` (> 0; 0.99 is YCSB's).
    pub zipf_exponent: f64,
    /// Bytes of each SET value (`redis-benchmark -d`).
    pub value_bytes: u32,
    /// Command classes by name, each with its weight and command. Default: `ping`.
    pub ops: BTreeMap<String, RedisOpSpec>,
    /// Most bytes a connection holds waiting for one reply to be whole (RESP3 pushes before it
    /// included): 64 MiB, from 1 KiB to 1 GiB. A reply past it ends the connection as the
    /// server's protocol error — a peer announcing 2^32 elements and sending them for ever is
    /// not waited for.
    pub max_reply: u64,
    /// `AUTH` on every connection before its first command: `user` (an ACL user; without it
    /// Redis's `default`) and the password from an environment variable or a file
    /// (`password_env`, `password_file`), never from the scenario.
    #[serde(skip_serializing_if = "crate::broker_auth::AuthSpec::is_empty")]
    pub auth: crate::broker_auth::AuthSpec,
    /// TLS to the server, on when the section is there (`[redis.tls] ca_file`, `insecure`,
    /// `server_name`, `cert_file` and `key_file`), as `[pubsub.tls]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::broker_tls::BrokerTlsSpec>,
}

impl Default for RedisSpec {
    fn default() -> Self {
        RedisSpec {
            address: "127.0.0.1:6379".into(),
            keys: 0,
            key_pattern: KeyPattern::Uniform,
            zipf_exponent: 0.99,
            value_bytes: 3,
            ops: BTreeMap::new(),
            max_reply: 64 << 20,
            auth: crate::broker_auth::AuthSpec::default(),
            tls: None,
        }
    }
}

/// How the key of each command is picked from the key space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KeyPattern {
    /// Every key equally likely (`redis-benchmark -r`).
    Uniform,
    /// 0, 1, 2, … on each connection, wrapping at `keys`.
    Sequential,
    /// Key k with probability ∝ 1/(k+1)^`zipf_exponent`.
    Zipf,
}

/// One class of the Redis command mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisOpSpec {
    /// Relative weight in the mix.
    pub weight: f64,
    /// `ping`, `get`, `set`, or the command's arguments with `{key}` and `{data}`
    /// placeholders: `["LPUSH", "list:{key}", "{data}"]`.
    pub command: RedisCommandSpec,
}

/// A command as the scenario writes it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RedisCommandSpec {
    /// One of the built-in commands.
    Named(RedisCommand),
    /// Any command, as its arguments.
    Args(Vec<String>),
}

/// By hand rather than `untagged`, whose error ("data did not match any variant") names
/// neither the value nor the way to write it.
impl<'de> Deserialize<'de> for RedisCommandSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Command;
        impl<'de> serde::de::Visitor<'de> for Command {
            type Value = RedisCommandSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("ping, get, set, or the command's arguments as a list, e.g. [\"HSET\", \"user:{key}\", \"name\", \"{data}\"]")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let named = match v.to_ascii_lowercase().as_str() {
                    "ping" => RedisCommand::Ping,
                    "get" => RedisCommand::Get,
                    "set" => RedisCommand::Set,
                    _ => {
                        // Suggest the list form of what was typed: `GET k:{key}` →
                        // ["GET", "k:{key}"].
                        let words: Vec<String> =
                            v.split_whitespace().map(|w| format!("{w:?}")).collect();
                        let example = if words.is_empty() {
                            "[\"HSET\", \"user:{key}\", \"name\", \"{data}\"]".to_string()
                        } else {
                            format!("[{}]", words.join(", "))
                        };
                        return Err(E::custom(format!(
                            "unknown command {v:?}: give ping, get or set, or any command as its arguments, e.g. {example}"
                        )));
                    }
                };
                Ok(RedisCommandSpec::Named(named))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut args = Vec::new();
                while let Some(a) = seq.next_element::<String>()? {
                    args.push(a);
                }
                Ok(RedisCommandSpec::Args(args))
            }
        }
        d.deserialize_any(Command)
    }
}

impl Default for RedisOpSpec {
    fn default() -> Self {
        RedisOpSpec {
            weight: 1.0,
            command: RedisCommandSpec::Named(RedisCommand::Ping),
        }
    }
}

/// The built-in commands, shorthands for their arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RedisCommand {
    /// `PING` (answer `+PONG`).
    Ping,
    /// `GET key` (answer a bulk string or nil).
    Get,
    /// `SET key value` (answer `+OK`).
    Set,
}

/// Validated `[redis]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// Server address.
    pub address: String,
    /// Key space (0: one fixed key).
    pub keys: u64,
    /// How keys are picked.
    pub key_pattern: KeyPattern,
    /// The exponent of `zipf`.
    pub zipf_exponent: f64,
    /// Size of `{data}` (the SET value).
    pub value_bytes: u32,
    /// The mix: `(class name, share, the command's arguments with placeholders)`.
    pub ops: Vec<(String, f64, Vec<String>)>,
    /// Most bytes waited for one reply.
    pub max_reply: usize,
    /// `AUTH` credentials (`None`: none sent).
    pub auth: Option<crate::broker_auth::Credentials>,
    /// TLS to the server (`None`: plain).
    pub tls: Option<crate::broker_tls::BrokerTls>,
}

/// Arguments of a command at most (Redis itself takes far more; a scenario with more is a typo).
pub const MAX_ARGS: usize = 1024;
/// The placeholders an argument may hold.
pub const PLACEHOLDERS: [&str; 2] = ["{key}", "{data}"];

impl RedisCommand {
    /// Its arguments with placeholders, as redis-benchmark sends it.
    pub fn args(self) -> Vec<String> {
        let args: &[&str] = match self {
            RedisCommand::Ping => &["PING"],
            RedisCommand::Get => &["GET", "key:{key}"],
            RedisCommand::Set => &["SET", "key:{key}", "{data}"],
        };
        args.iter().map(|a| a.to_string()).collect()
    }
}

/// Checks one command's arguments: some, not too many, and no placeholder but `{key}` and
/// `{data}` (a `{` that starts neither is most likely a typo such as `{keys}`).
fn check_args(field: &str, args: &[String], invalid: &Invalid) -> Result<(), ScenarioError> {
    if args.is_empty() || args[0].is_empty() {
        return Err(invalid(
            field,
            "is empty".into(),
            "give the command and its arguments, e.g. [\"HSET\", \"user:{key}\", \"name\", \"{data}\"]",
        ));
    }
    if args.len() > MAX_ARGS {
        return Err(invalid(
            field,
            format!("has {} arguments", args.len()),
            "give at most 1024",
        ));
    }
    // Other braces are data (a JSON argument, a Cluster hash tag `{user1}`); only a near miss
    // of a placeholder (`{keys}`, `{Key}`, `{dat}`) is refused as the typo it most likely is.
    for a in args {
        let mut rest = a.as_str();
        while let Some(i) = rest.find('{') {
            rest = &rest[i + 1..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
                .to_ascii_lowercase();
            let exact = PLACEHOLDERS.iter().any(|p| rest.starts_with(&p[1..]));
            let near = ["key", "dat"].iter().any(|w| word.starts_with(w));
            if near && !exact {
                let token: String = rest.chars().take_while(|&c| c != '}').collect();
                return Err(invalid(
                    field,
                    format!("has the unknown placeholder `{{{token}}}` in {a:?}"),
                    "the placeholders are {key} (a key number from the key space) and {data} (value_bytes bytes); other braces are sent as they are",
                ));
            }
        }
    }
    Ok(())
}

impl RedisSpec {
    pub(crate) fn validate(&self, invalid: &Invalid) -> Result<RedisConfig, ScenarioError> {
        check_endpoint("redis.address", &self.address, invalid)?;
        if self.value_bytes > 512 << 20 {
            return Err(invalid(
                "redis.value_bytes",
                format!("is {}", self.value_bytes),
                "Redis values are at most 512 MiB",
            ));
        }
        if !(1024..=1 << 30).contains(&self.max_reply) {
            return Err(invalid(
                "redis.max_reply",
                format!("is {}", self.max_reply),
                "give 1024 (1 KiB) to 1073741824 (1 GiB) bytes",
            ));
        }
        let default_ops: BTreeMap<String, RedisOpSpec> =
            [("ping".to_string(), RedisOpSpec::default())].into();
        let ops = if self.ops.is_empty() {
            &default_ops
        } else {
            &self.ops
        };
        if self.keys > 1_000_000_000_000 {
            return Err(invalid(
                "redis.keys",
                format!("is {}", self.keys),
                "keys are 12 digits: give at most 1000000000000",
            ));
        }
        if self.key_pattern == KeyPattern::Zipf
            && !(self.zipf_exponent.is_finite() && self.zipf_exponent > 0.0)
        {
            return Err(invalid(
                "redis.zipf_exponent",
                format!("is {}", self.zipf_exponent),
                "give an exponent above 0 (0.99 is YCSB's)",
            ));
        }
        if self.key_pattern != KeyPattern::Uniform && self.keys == 0 {
            return Err(invalid(
                "redis.key_pattern",
                format!("is {:?} with keys = 0", self.key_pattern),
                "set redis.keys to the size of the key space, e.g. 100000",
            ));
        }
        let shares = shares("redis.ops", ops, |o| o.weight, invalid)?;
        let mut mix = Vec::new();
        for ((name, op), share) in ops.iter().zip(shares) {
            let args = match &op.command {
                RedisCommandSpec::Named(c) => c.args(),
                RedisCommandSpec::Args(a) => a.clone(),
            };
            check_args(&format!("redis.ops.{name}.command"), &args, invalid)?;
            mix.push((name.clone(), share, args));
        }
        Ok(RedisConfig {
            address: self.address.clone(),
            keys: self.keys,
            key_pattern: self.key_pattern,
            zipf_exponent: self.zipf_exponent,
            value_bytes: self.value_bytes,
            ops: mix,
            max_reply: self.max_reply as usize,
            auth: (self.auth).validate_in("redis.auth", crate::broker::Broker::Redis, invalid)?,
            tls: self.checked_tls(invalid)?,
        })
    }

    /// `[redis.tls]`, over TCP only.
    fn checked_tls(
        &self,
        invalid: &Invalid,
    ) -> Result<Option<crate::broker_tls::BrokerTls>, ScenarioError> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        if self.address.starts_with("unix:") {
            return Err(invalid(
                "redis.tls",
                format!("is given with the Unix socket {}", self.address),
                "TLS runs over TCP: give redis.address as host:port, or take [redis.tls] out",
            ));
        }
        tls.validate("redis.tls", &self.address, invalid).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn redis_refuses_what_it_cannot_run() {
        for (text, field) in [
            ("[redis]\nmax_reply = 100\n", "redis.max_reply"),
            ("[redis]\nmax_reply = 2000000000\n", "redis.max_reply"),
            ("[redis]\naddress = \"\"\n", "redis.address"),
            (
                "[redis]\naddress = \"unix://run/r.sock\"\n",
                "redis.address",
            ),
            ("[redis]\nvalue_bytes = 600000000\n", "redis.value_bytes"),
            ("[redis.ops.x]\nweight = 0\n", "redis.ops.x.weight"),
            ("[redis.ops.x]\ncommand = []\n", "redis.ops.x.command"),
            (
                "[redis.ops.x]\ncommand = [\"GET\", \"k:{keys}\"]\n",
                "redis.ops.x.command",
            ),
            ("[redis]\nkey_pattern = \"zipf\"\n", "redis.key_pattern"),
            ("[redis]\nkeys = 2000000000000\n", "redis.keys"),
            (
                "[redis]\nkeys = 10\nkey_pattern = \"zipf\"\nzipf_exponent = 0\n",
                "redis.zipf_exponent",
            ),
        ] {
            assert_eq!(
                refused(&format!("system = \"redis\"\n{text}")).0,
                field,
                "{text}"
            );
        }
    }

    #[test]
    fn a_redis_scenario_keeps_its_mix() {
        let s = valid("system = \"redis\"\n[redis.ops.ping]\ncommand = \"ping\"\nweight = 1\n[redis.ops.set]\ncommand = \"set\"\nweight = 3\n");
        let crate::scenario::System::Redis { redis, .. } = s.system else {
            panic!("redis")
        };
        let shares: Vec<f64> = redis.ops.iter().map(|o| o.1).collect();
        assert_eq!(shares, [0.25, 0.75]);
        assert_eq!(redis.ops[1].2, ["SET", "key:{key}", "{data}"]);
    }

    #[test]
    fn any_command_is_its_arguments() {
        let s = valid("system = \"redis\"\n[redis]\nkeys = 1000\nkey_pattern = \"zipf\"\n[redis.ops.hset]\ncommand = [\"HSET\", \"user:{key}\", \"name\", \"{data}\"]\n");
        let crate::scenario::System::Redis { redis, .. } = s.system else {
            panic!("redis")
        };
        assert_eq!(redis.ops[0].2, ["HSET", "user:{key}", "name", "{data}"]);
        assert_eq!(redis.key_pattern, super::KeyPattern::Zipf);
        // Braces that are data: a hash tag, a JSON document.
        valid("system = \"redis\"\n[redis.ops.j]\ncommand = [\"JSON.SET\", \"{user1}:{key}\", \"$\", '{\"a\":1}']\n");
    }
}
