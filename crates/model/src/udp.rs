//! `ticks.address = "udp://HOST:PORT"`: a UDP feed the tick clients receive — unicast (client
//! `k` of the run binds `HOST:PORT+k`: the sender sends each its copy) or an IPv4 multicast
//! group (every client binds the group's port and joins it on `[ticks.udp] interface`).
//! Datagrams hold msgbench's 36-byte binary ticks, or what `[ticks.feed]` says (JSON or binary
//! fields at offsets).
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};

/// The address scheme of a UDP feed.
pub const UDP_SCHEME: &str = "udp://";

/// The `[ticks.udp]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UdpSpec {
    /// Multicast: the address of the interface to join the group on (`0.0.0.0`: the one the
    /// kernel's routes choose; `127.0.0.1` for loopback).
    pub interface: String,
}

impl Default for UdpSpec {
    fn default() -> Self {
        UdpSpec {
            interface: "0.0.0.0".into(),
        }
    }
}

/// A validated UDP feed.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpFeed {
    /// Unicast: where client 0 binds (client `k` binds the port + `k`); multicast: the group
    /// and its port.
    pub address: SocketAddr,
    /// Multicast: the interface to join on (`None`: unicast).
    pub multicast: Option<Ipv4Addr>,
}

impl UdpFeed {
    /// Where run-wide client `ordinal` receives.
    pub fn bind_for(&self, ordinal: usize) -> SocketAddr {
        match self.multicast {
            Some(_) => self.address,
            None => {
                let mut a = self.address;
                a.set_port(self.address.port() + ordinal as u16);
                a
            }
        }
    }
}

impl UdpSpec {
    /// The feed at `address` (`udp://HOST:PORT`) for `clients` clients in all.
    pub(crate) fn validate(
        &self,
        address: &str,
        clients: usize,
        invalid: &Invalid,
    ) -> Result<UdpFeed, ScenarioError> {
        let text = address.strip_prefix(UDP_SCHEME).unwrap_or(address);
        let parsed: Option<SocketAddr> = text.parse().ok().filter(|a: &SocketAddr| a.port() != 0);
        let Some(address) = parsed else {
            return Err(invalid(
                "ticks.address",
                format!("is \"{address}\", not udp:// with an IP address and a port"),
                "write it like \"udp://127.0.0.1:9500\" (unicast: client k receives on port 9500 + k) or \"udp://239.1.1.1:9500\" (a multicast group)",
            ));
        };
        let multicast = match address {
            SocketAddr::V4(a) if a.ip().is_multicast() => {
                Some(self.interface.parse::<Ipv4Addr>().map_err(|_| {
                    invalid(
                        "ticks.udp.interface",
                        format!("is {:?}", self.interface),
                        "give the IPv4 address of the interface to join the group on, e.g. \"127.0.0.1\" or \"0.0.0.0\"",
                    )
                })?)
            }
            SocketAddr::V6(a) if a.ip().is_multicast() => {
                return Err(invalid(
                    "ticks.address",
                    format!("is the IPv6 multicast group {a}"),
                    "multicast feeds are IPv4 here (udp://239.1.1.1:9500); IPv6 unicast works",
                ))
            }
            _ => None,
        };
        if multicast.is_none() && usize::from(address.port()) + clients > 65_536 {
            return Err(invalid(
                "ticks.address",
                format!(
                    "gives port {}, but {clients} clients need a port each from it",
                    address.port()
                ),
                "start lower, so that port + clients stays within 65535",
            ));
        }
        Ok(UdpFeed { address, multicast })
    }
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

    #[test]
    fn unicast_clients_take_a_port_each_and_multicast_ones_share_the_group() {
        let spec = UdpSpec::default();
        let u = spec.validate("udp://127.0.0.1:9500", 3, &invalid).unwrap();
        assert_eq!(u.bind_for(2), "127.0.0.1:9502".parse().unwrap());
        let m = spec.validate("udp://239.1.1.1:9500", 3, &invalid).unwrap();
        assert_eq!(m.bind_for(2), "239.1.1.1:9500".parse().unwrap());
        assert_eq!(m.multicast, Some(Ipv4Addr::UNSPECIFIED));
        for bad in [
            "udp://localhost:9500",
            "udp://127.0.0.1:0",
            "udp://127.0.0.1",
        ] {
            assert!(spec.validate(bad, 1, &invalid).is_err(), "{bad}");
        }
        assert!(spec.validate("udp://127.0.0.1:65535", 2, &invalid).is_err());
    }
}
