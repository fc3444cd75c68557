//! `[pubsub.tls]`: TLS to a broker, with the HTTP client's conventions — the Mozilla roots
//! plus a `ca_file`, or `insecure` (no verification, said in every result), and a client
//! certificate and key for mutual TLS. The section being there turns TLS on: NATS upgrades
//! after its plaintext `INFO` (as its clients do), MQTT and Redis speak TLS from the first
//! byte. Files are checked when the scenario is; their contents when the run opens.
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};

/// The `[pubsub.tls]` section (and `[redis.tls]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerTlsSpec {
    /// A PEM file of CA certificates the broker's certificate may chain to, besides the
    /// Mozilla roots compiled in (for a private or test CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Take any certificate, unverified (every result says so). Off by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The name the broker's certificate must carry; default: the address's host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// Mutual TLS: msgbench's certificate chain (PEM), shown to a broker that asks for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// Mutual TLS: the private key of `cert_file` (PEM). Not a secret the scenario holds:
    /// only its path is written into results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// Validated TLS settings for a broker connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerTls {
    /// The name the certificate must carry.
    pub server_name: String,
    /// Extra CA certificates (PEM).
    pub ca_file: Option<String>,
    /// No verification at all.
    pub insecure: bool,
    /// Mutual TLS: the certificate chain's file and its key's file.
    pub client_cert: Option<(String, String)>,
    /// The section's name, for messages (`pubsub.tls`, `redis.tls`).
    pub section: &'static str,
}

impl BrokerTlsSpec {
    /// The settings for a broker at `address` (`host:port`), every named file readable.
    pub fn validate(
        &self,
        section: &'static str,
        address: &str,
        invalid: &Invalid,
    ) -> Result<BrokerTls, ScenarioError> {
        let key = |name: &str| format!("{section}.{name}");
        let client_cert = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(k)) => Some((cert.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(invalid(
                    &key("cert_file"),
                    "is given without key_file, or key_file without it".into(),
                    "mutual TLS needs both: cert_file = \"client.pem\" and key_file = \"client-key.pem\"",
                ))
            }
        };
        for (name, file, holds) in [
            ("ca_file", &self.ca_file, "CERTIFICATE-----"),
            ("cert_file", &self.cert_file, "CERTIFICATE-----"),
            ("key_file", &self.key_file, "PRIVATE KEY-----"),
        ] {
            if let Some(path) = file {
                check_pem(path, holds).map_err(|problem| {
                    invalid(
                        &key(name),
                        format!("is \"{path}\", which {problem}"),
                        "give the path of a PEM file of what it names (relative to where msgbench runs)",
                    )
                })?;
            }
        }
        if self.insecure && self.ca_file.is_some() {
            return Err(invalid(
                &key("insecure"),
                "is true with a ca_file".into(),
                "choose one: ca_file verifies the broker against that CA, insecure verifies nothing",
            ));
        }
        let server_name = match &self.server_name {
            Some(name) if !name.is_empty() => name.clone(),
            Some(_) => {
                return Err(invalid(
                    &key("server_name"),
                    "is empty".into(),
                    "give the name the broker's certificate carries, or leave it out for the address's host",
                ))
            }
            None => host_of(address).to_string(),
        };
        Ok(BrokerTls {
            server_name,
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
            client_cert,
            section,
        })
    }
}

/// Largest PEM file read at check (a CA bundle of every public root is about 250 KB).
const MAX_PEM: u64 = 4 << 20;

/// The file at `path` is readable PEM holding a `-----BEGIN …{holds}` block; what is wrong
/// with it otherwise (never its contents).
fn check_pem(path: &str, holds: &str) -> Result<(), String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot be read ({e})"))?
        .len();
    if size > MAX_PEM {
        return Err(format!("is {size} bytes, over 4 MiB"));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read ({e})"))?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.ends_with(holds));
    match found {
        true => Ok(()),
        false => Err(format!(
            "holds no PEM block ending {holds:?} (-----BEGIN {})",
            holds.trim_end_matches('-')
        )),
    }
}

/// The host of `host:port` (`[::1]:4222` → `::1`).
fn host_of(address: &str) -> &str {
    let host = match address.rsplit_once(':') {
        Some((host, _)) => host,
        None => address,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(field: &str, problem: String, fix: &str) -> ScenarioError {
        ScenarioError::Invalid {
            source_name: "t".into(),
            field: field.into(),
            problem,
            fix: fix.into(),
        }
    }

    fn refused(spec: &BrokerTlsSpec) -> String {
        match spec.validate("pubsub.tls", "127.0.0.1:4222", &invalid) {
            Err(ScenarioError::Invalid { field, problem, .. }) => format!("{field}: {problem}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_server_name_is_the_address_s_host_unless_given() {
        let spec = BrokerTlsSpec::default();
        let tls = spec.validate("pubsub.tls", "[::1]:4222", &invalid).unwrap();
        assert_eq!(tls.server_name, "::1");
        let named = BrokerTlsSpec {
            server_name: Some("nats.example".into()),
            ..Default::default()
        };
        let tls = named
            .validate("pubsub.tls", "127.0.0.1:8883", &invalid)
            .unwrap();
        assert_eq!(tls.server_name, "nats.example");
        assert_eq!(tls.client_cert, None);
    }

    #[test]
    fn half_a_client_certificate_a_missing_file_kafka_and_insecure_with_a_ca_are_refused() {
        let half = BrokerTlsSpec {
            cert_file: Some("/no/such/cert.pem".into()),
            ..Default::default()
        };
        assert!(refused(&half).starts_with("pubsub.tls.cert_file"));
        let missing = BrokerTlsSpec {
            ca_file: Some("/no/such/ca.pem".into()),
            ..Default::default()
        };
        assert!(refused(&missing).contains("/no/such/ca.pem"));
        let not_pem = BrokerTlsSpec {
            ca_file: Some("Cargo.toml".into()),
            ..Default::default()
        };
        assert!(refused(&not_pem).contains("holds no PEM block"));
        let dir = std::env::temp_dir().join(format!("msgbench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let both = BrokerTlsSpec {
            ca_file: Some(ca.display().to_string()),
            insecure: true,
            ..Default::default()
        };
        assert!(refused(&both).starts_with("pubsub.tls.insecure"));
    }
}
