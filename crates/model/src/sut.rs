//! The `[sut]` section: an external server a run starts, waits for and stops
//! ([`SutSpec`] → [`SutConfig`]).
use crate::check::{check_endpoint, Invalid, ScenarioError, MAX_DURATION};
use crate::duration::serde_text_opt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The `[sut]` section: an external server msgbench starts before the run and stops after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SutSpec {
    /// Shell command that starts the server in the foreground (run with `sh -c`, in its own
    /// process group, so everything it starts is measured and stopped). In it, `$MSGBENCH` is
    /// msgbench itself and `$MSGBENCH_READY` the address the run waits on (a scenario that
    /// compares servers starts the one of its point).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `host:port` that accepts TCP connections once the server is ready (default: the
    /// system's address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// How long to wait for readiness.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub ready_timeout: Option<Duration>,
}

/// Validated `[sut]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SutConfig {
    /// The command.
    pub command: String,
    /// Readiness address.
    pub ready: String,
    /// Readiness timeout.
    pub ready_timeout: Duration,
}

impl SutSpec {
    pub(crate) fn validate(
        &self,
        system_address: Option<&str>,
        invalid: &Invalid,
    ) -> Result<Option<SutConfig>, ScenarioError> {
        let Some(command) = &self.command else {
            if self.ready.is_some() || self.ready_timeout.is_some() {
                return Err(invalid(
                    "sut.command",
                    "is missing".into(),
                    "name the command that starts the server, or remove the [sut] section",
                ));
            }
            return Ok(None);
        };
        if command.trim().is_empty() {
            return Err(invalid(
                "sut.command",
                "is empty".into(),
                "name the command that starts the server",
            ));
        }
        let ready = match (&self.ready, system_address) {
            (Some(r), _) => r.clone(),
            (None, Some(a)) => a.to_string(),
            (None, None) => {
                return Err(invalid(
                    "sut.ready",
                    "is missing and the system has no address".into(),
                    "set `sut.ready = \"127.0.0.1:PORT\"` and the system's address to the server's port",
                ))
            }
        };
        check_endpoint("sut.ready", &ready, invalid)?;
        let ready_timeout = self.ready_timeout.unwrap_or(Duration::from_secs(10));
        if ready_timeout.is_zero() || ready_timeout > MAX_DURATION {
            return Err(invalid(
                "sut.ready_timeout",
                format!("is {}", crate::duration::format(ready_timeout)),
                "give a timeout such as \"10s\"",
            ));
        }
        Ok(Some(SutConfig {
            command: command.clone(),
            ready,
            ready_timeout,
        }))
    }
}

/// `[sut]` starts a server, so the system's `field` must say where it listens (a `what`, such as
/// "address" or "ws:// address").
pub(crate) fn check_address_given(
    sut: Option<&SutConfig>,
    address: Option<&str>,
    field: &str,
    what: &str,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    if sut.is_some() && address.is_none() {
        return Err(invalid(
            field,
            "is missing while [sut] starts a server".into(),
            &format!("set it to the {what} the started server listens on"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn sut_refuses_what_it_cannot_start() {
        let base = "system = \"redis\"\n[redis]\naddress = \"127.0.0.1:6399\"\n[sut]\n";
        for (text, field) in [
            ("command = \"\"\n", "sut.command"),
            (
                "command = \"redis-server\"\nready_timeout = \"0s\"\n",
                "sut.ready_timeout",
            ),
            (
                "command = \"redis-server\"\nready = \"nowhere\"\n",
                "sut.ready",
            ),
        ] {
            assert_eq!(refused(&format!("{base}{text}")).0, field, "{text}");
        }
        let s = valid(&format!(
            "{base}command = \"exec redis-server --port 6399\"\n"
        ));
        let crate::scenario::System::Redis { sut, .. } = s.system else {
            panic!("redis")
        };
        assert_eq!(
            sut.unwrap().ready,
            "127.0.0.1:6399",
            "ready defaults to the address"
        );
    }
}
