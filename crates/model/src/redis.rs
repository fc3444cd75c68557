//! The `[redis]` section: the address, the command mix and the key space
//! ([`RedisSpec`] → [`RedisConfig`]).
use crate::check::{check_address, shares, Invalid, ScenarioError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `[redis]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSpec {
    /// `host:port` of the Redis server.
    pub address: String,
    /// Keys are `key:000000000000` … `key:<keys−1>`, picked uniformly (`redis-benchmark -r`);
    /// 0 uses the single key `key:__rand_int__` as `redis-benchmark` does without `-r`.
    pub keys: u64,
    /// Bytes of each SET value (`redis-benchmark -d`).
    pub value_bytes: u32,
    /// Command classes by name, each with its weight and command. Default: `ping`.
    pub ops: BTreeMap<String, RedisOpSpec>,
}

impl Default for RedisSpec {
    fn default() -> Self {
        RedisSpec {
            address: "127.0.0.1:6379".into(),
            keys: 0,
            value_bytes: 3,
            ops: BTreeMap::new(),
        }
    }
}

/// One class of the Redis command mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RedisOpSpec {
    /// Relative weight in the mix.
    pub weight: f64,
    /// `ping`, `get` or `set`.
    pub command: RedisCommand,
}

impl Default for RedisOpSpec {
    fn default() -> Self {
        RedisOpSpec {
            weight: 1.0,
            command: RedisCommand::Ping,
        }
    }
}

/// Redis commands the driver sends.
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
    /// SET value size.
    pub value_bytes: u32,
    /// The mix: `(class name, share, command)`.
    pub ops: Vec<(String, f64, RedisCommand)>,
}

impl RedisSpec {
    pub(crate) fn validate(&self, invalid: &Invalid) -> Result<RedisConfig, ScenarioError> {
        check_address("redis.address", &self.address, invalid)?;
        if self.value_bytes > 512 << 20 {
            return Err(invalid(
                "redis.value_bytes",
                format!("is {}", self.value_bytes),
                "Redis values are at most 512 MiB",
            ));
        }
        let default_ops: BTreeMap<String, RedisOpSpec> =
            [("ping".to_string(), RedisOpSpec::default())].into();
        let ops = if self.ops.is_empty() {
            &default_ops
        } else {
            &self.ops
        };
        let shares = shares("redis.ops", ops, |o| o.weight, invalid)?;
        Ok(RedisConfig {
            address: self.address.clone(),
            keys: self.keys,
            value_bytes: self.value_bytes,
            ops: ops
                .iter()
                .zip(shares)
                .map(|((name, op), share)| (name.clone(), share, op.command))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn redis_refuses_what_it_cannot_run() {
        for (text, field) in [
            ("[redis]\naddress = \"\"\n", "redis.address"),
            ("[redis]\nvalue_bytes = 600000000\n", "redis.value_bytes"),
            ("[redis.ops.x]\nweight = 0\n", "redis.ops.x.weight"),
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
    }
}
