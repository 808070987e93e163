//! Who is in the fleet, as both binaries take it: the static member list
//! (or none: the node registry), candidates per database, the operator's
//! placement map, and whether a node's certificate must name it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::placement::{self, Member};
use crate::process::ConfigError;

/// The membership flags, the same on every node and ingress of a fleet.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "Membership")]
#[serde(default)]
pub struct MembershipFlags {
    /// Fleet member (a transactor node), repeatable:
    /// `NODE_ID=ENDPOINT[,zone=Z][,weight=N]`; every node and ingress of a
    /// fleet gets the same list. Without any, the live members are read
    /// from the node registry in storage. A node not in the list is added
    /// from its own flags.
    #[arg(long = "member")]
    pub members: Option<Vec<String>>,
    /// Candidates per database, the same on every node and ingress
    /// [default: 2].
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Operator placement map (the same file on every node and ingress):
    /// lines `database = node, node` (best first) that override rendezvous
    /// placement. Checked at start (exit 2 with the line at fault) and
    /// re-read every few seconds; a bad edit is refused and the previous map
    /// stays in force.
    #[arg(long)]
    pub placement_map: Option<PathBuf>,
    /// With mTLS: a node's certificate must name its node id (as a DNS
    /// name) when it is dialled (by a peer node for a handoff or a drain, by
    /// the ingress for every call), so a registry record pointing one node's
    /// id at another endpoint is refused. Turn off only for certificates
    /// shared by all nodes (the chart's shared-certificate modes)
    /// [default: true].
    #[arg(long, value_name = "BOOL")]
    pub verify_node_identity: Option<bool>,
}

/// The validated membership settings.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Membership {
    /// The static member list (`--member`), node ids unique; empty: follow
    /// the node registry in storage.
    pub members: Vec<Member>,
    /// Candidates per database (at least 1).
    pub replicas: usize,
    /// The operator's placement map file, checked against the members once
    /// they are known.
    pub placement_map: Option<PathBuf>,
    /// Whether a node's certificate must name its node id (mTLS).
    pub verify_node_identity: bool,
}

impl MembershipFlags {
    /// Validates into a [`Membership`]. `mtls`: whether this process's
    /// calls to nodes are mutual TLS, which `tls_flags` (named in a refusal)
    /// set up: every member's scheme must match (`http://` is refused with
    /// mTLS, where the principal would travel unprotected; `https://` needs
    /// it).
    ///
    /// # Errors
    /// A message naming the flag at fault.
    pub fn validate(self, mtls: bool, tls_flags: &str) -> Result<Membership, ConfigError> {
        let members = self
            .members
            .unwrap_or_default()
            .iter()
            .map(|text| text.parse::<Member>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| ConfigError::setting("--member", error))?;
        placement::check_unique(&members).map_err(|error| ConfigError::setting("--member", error))?;
        let scheme = if mtls { "http://" } else { "https://" };
        if let Some(member) = members.iter().find(|member| member.endpoint.starts_with(scheme)) {
            let why = if mtls {
                format!("calls to nodes are mutual TLS ({tls_flags}); a cleartext member is refused")
            } else {
                format!("https members need {tls_flags}")
            };
            return Err(ConfigError::from(format!(
                "--member {}={}: {why}",
                member.node_id, member.endpoint
            )));
        }
        let replicas = self.replicas.unwrap_or(placement::DEFAULT_REPLICAS);
        if replicas == 0 {
            return Err(ConfigError::from("--replicas must be at least 1"));
        }
        Ok(Membership {
            members,
            replicas,
            placement_map: self.placement_map,
            verify_node_identity: self.verify_node_identity.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TLS: &str = "--tls-cert, --tls-key and --tls-client-ca";

    fn flags(members: &[&str]) -> MembershipFlags {
        MembershipFlags {
            members: Some(members.iter().map(|member| (*member).to_owned()).collect()),
            ..MembershipFlags::default()
        }
    }

    #[test]
    fn defaults_are_the_registry_two_candidates_and_verified_names() {
        let membership = MembershipFlags::default().validate(false, TLS).unwrap();
        assert!(membership.members.is_empty());
        assert_eq!(membership.replicas, placement::DEFAULT_REPLICAS);
        assert!(membership.verify_node_identity);
        assert_eq!(membership.placement_map, None);
    }

    #[test]
    fn members_are_parsed_once_and_checked_unique() {
        let membership = flags(&["a=http://a:1,zone=z1,weight=2", "b=http://b:1"])
            .validate(false, TLS)
            .unwrap();
        assert_eq!(membership.members.len(), 2);
        assert_eq!(membership.members[0].zone, "z1");
        assert_eq!(membership.members[0].weight, 2);
        let error = flags(&["x"]).validate(false, TLS).unwrap_err().to_string();
        assert!(error.starts_with("--member: "), "{error}");
        let error = flags(&["a=http://x", "a=http://y"])
            .validate(false, TLS)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--member") && error.contains("twice"), "{error}");
    }

    #[test]
    fn member_schemes_match_the_internal_tls() {
        let error = flags(&["a=http://a"])
            .validate(true, TLS)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--member a=http://a") && error.contains("cleartext"),
            "{error}"
        );
        assert!(error.contains(TLS), "{error}");
        let error = flags(&["a=https://a"])
            .validate(false, TLS)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--member a=https://a") && error.contains(TLS),
            "{error}"
        );
        assert!(flags(&["a=https://a"]).validate(true, TLS).is_ok());
        assert!(flags(&["a=http://a"]).validate(false, TLS).is_ok());
    }

    #[test]
    fn zero_replicas_are_refused() {
        let zero = MembershipFlags {
            replicas: Some(0),
            ..MembershipFlags::default()
        };
        assert!(
            zero.validate(false, TLS)
                .unwrap_err()
                .to_string()
                .contains("--replicas")
        );
    }
}
