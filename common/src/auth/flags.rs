//! The authentication flags of a stock `corium transactor` (corium-cli
//! 0.1.90 `ServeFlags`), taken by both fleet tiers with the same names,
//! environment variables and meaning, so a client set up for stock Corium
//! works unchanged:
//!
//! - no flag: the development token `corium-dev-insecure-token` is accepted
//!   (as principal `static-token/operator`, role `admin`) and callers with
//!   no token are admitted as anonymous;
//! - `--serve-token` (env `CORIUM_SERVE_TOKEN`): only that token, nothing
//!   anonymous; `--require-auth`: the development token required;
//! - `--oidc-issuer` with `--oidc-jwks-file` (and `--oidc-audience`): JWTs
//!   of that issuer too, strict;
//! - `--serve-open`: nothing checked, everyone anonymous.
//!
//! Two additions of the fleet's: `--operator-role` names the role that may
//! use the operator surface (`FleetAdmin`, `GcDeletedDatabases`) — default
//! `fleet-operator`, a role apart from Corium's data-admin role `admin` — and
//! `--dev-token-operator` gives the public development token that role too,
//! which only `corium-fleet dev` (and the tests' local fleets) pass. The
//! `--serve-token` principal, a deployment's own secret, holds both roles.

use std::path::PathBuf;
use std::sync::Arc;

use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::authz::{
    Authorizer, CompositeProvider, Credentials, ExternalTokens, Guard, IdentityProvider, Principal,
    StaticTokens,
};

use crate::process::ConfigError;

/// The role a node's own certificate carries when it calls another node
/// without a bearer token (handoff and drain ask a peer to activate): the
/// operator surface admits it besides `--operator-role`.
pub const FLEET_NODE_ROLE: &str = "corium-fleet-node";

/// Stock Corium's data-administrator role, which its static token holds.
pub const DATA_ADMIN_ROLE: &str = "admin";

/// The operator role unless `--operator-role` names another.
pub const DEFAULT_OPERATOR_ROLE: &str = "fleet-operator";

/// Client authentication, as a stock Corium transactor takes it.
#[derive(clap::Args, Clone, Default)]
pub struct AuthFlags {
    /// Require this exact bearer token from clients (strict: rejects
    /// anonymous callers and every other credential). Overrides the shared
    /// development token. As stock Corium's flag.
    #[arg(long, env = "CORIUM_SERVE_TOKEN", hide_env_values = true)]
    pub serve_token: Option<String>,
    /// Require the development token (or --serve-token) on every request:
    /// reject anonymous callers. As stock Corium's flag.
    #[arg(long)]
    pub require_auth: bool,
    /// Disable authentication entirely: every request is anonymous and
    /// allowed. For a closed lab only. As stock Corium's flag.
    #[arg(long, conflicts_with_all = ["serve_token", "require_auth", "oidc_issuer"])]
    pub serve_open: bool,
    /// OIDC issuer whose JWTs are accepted (besides the static token);
    /// switches to strict mode. Needs --oidc-jwks-file (this build does not
    /// fetch keys over the network).
    #[arg(long, requires = "oidc_jwks_file")]
    pub oidc_issuer: Option<String>,
    /// Accepted OIDC audience (`aud`); repeatable. Strongly recommended with
    /// --oidc-issuer.
    #[arg(long = "oidc-audience")]
    pub oidc_audiences: Vec<String>,
    /// The issuer's JWKS, read from this file.
    #[arg(long, requires = "oidc_issuer")]
    pub oidc_jwks_file: Option<PathBuf>,
    /// The role whose holders may use the operator surface: `FleetAdmin`
    /// (status, placement, handoff, activate) and `GcDeletedDatabases`. The
    /// --serve-token principal holds it; the public development token only
    /// with --dev-token-operator [default: fleet-operator].
    #[arg(long)]
    pub operator_role: Option<String>,
    /// The public development token also holds the operator role: for a
    /// local development fleet only (`corium-fleet dev` passes it). Without
    /// it the development token is a data admin (`admin`), as in stock
    /// Corium, and not a fleet operator.
    #[arg(long)]
    pub dev_token_operator: bool,
}

impl std::fmt::Debug for AuthFlags {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself: configurations are logged.
        formatter
            .debug_struct("AuthFlags")
            .field("serve_token", &self.serve_token.as_ref().map(|_| "<redacted>"))
            .field("require_auth", &self.require_auth)
            .field("serve_open", &self.serve_open)
            .field("oidc_issuer", &self.oidc_issuer)
            .field("oidc_audiences", &self.oidc_audiences)
            .field("oidc_jwks_file", &self.oidc_jwks_file)
            .field("operator_role", &self.operator_role())
            .field("dev_token_operator", &self.dev_token_operator)
            .finish()
    }
}

impl AuthFlags {
    /// The role that may use the operator surface (`--operator-role`).
    #[must_use]
    pub fn operator_role(&self) -> &str {
        self.operator_role.as_deref().unwrap_or(DEFAULT_OPERATOR_ROLE)
    }

    /// Whether `principal` may use the operator surface: it holds the
    /// operator role, or it is another node of this fleet (by certificate).
    #[must_use]
    pub fn is_operator(&self, principal: &Principal) -> bool {
        self.serve_open || principal.has_role(self.operator_role()) || principal.has_role(FLEET_NODE_ROLE)
    }

    /// Whether authentication is off (`--serve-open`).
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.serve_open
    }

    /// Whether callers without an accepted credential are refused.
    #[must_use]
    pub fn is_strict(&self) -> bool {
        !self.serve_open && (self.serve_token.is_some() || self.require_auth || self.oidc_issuer.is_some())
    }

    /// The static token this configuration accepts: `--serve-token`, else
    /// the development token; `None` with `--serve-open`. Nodes present it to
    /// each other on a cleartext internal network, where no certificate can
    /// say who they are.
    #[must_use]
    pub fn static_token(&self) -> Option<String> {
        if self.serve_open {
            return None;
        }
        Some(
            self.serve_token
                .clone()
                .unwrap_or_else(|| DEFAULT_DEV_TOKEN.to_owned()),
        )
    }

    /// Checks the flags without building anything (a readable JWKS).
    ///
    /// # Errors
    /// A flag that cannot work, naming it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.oidc().map(|_| ())
    }

    /// The guard these flags select, authorizing with `authorizer` (stock
    /// Corium: permit-all unless a policy is configured).
    ///
    /// # Errors
    /// An unusable OIDC configuration.
    pub fn guard(&self, authorizer: Arc<dyn Authorizer>) -> Result<Guard, ConfigError> {
        if self.serve_open {
            return Ok(Guard::disabled());
        }
        let Some(secret) = self.static_token() else {
            return Ok(Guard::disabled());
        };
        if secret.is_empty() {
            return Err(ConfigError::setting("--serve-token", "must not be empty"));
        }
        // Stock Corium's static principal is a data admin; it is a fleet
        // operator too when the token is this deployment's own secret, or
        // when a development fleet says so.
        let mut principal = Principal::new("static-token", "operator").with_role(DATA_ADMIN_ROLE);
        if self.serve_token.is_some() || self.dev_token_operator {
            principal = principal.with_role(self.operator_role());
        }
        let statics: Arc<dyn IdentityProvider> = Arc::new(StaticTokens::new().with(secret, principal));
        let provider = match self.oidc()? {
            Some(oidc) => Arc::new(CompositeProvider::new(vec![statics, oidc])),
            None => statics,
        };
        Ok(Guard::new(provider, authorizer).allow_anonymous(!self.is_strict()))
    }

    fn oidc(&self) -> Result<Option<Arc<dyn IdentityProvider>>, ConfigError> {
        use corium_protocol::oidc::{OidcConfig, OidcVerifier};
        let (Some(issuer), Some(path)) = (&self.oidc_issuer, &self.oidc_jwks_file) else {
            return Ok(None);
        };
        let json = std::fs::read_to_string(path).map_err(|error| {
            ConfigError::setting(
                "--oidc-jwks-file",
                format!("cannot read {}: {error}", path.display()),
            )
        })?;
        let config = OidcConfig::new(issuer.clone(), self.oidc_audiences.clone());
        let verifier = OidcVerifier::from_jwks_json(config, &json)
            .map_err(|error| ConfigError::setting("--oidc-jwks-file", error))?;
        Ok(Some(Arc::new(ExternalTokens::new("oidc", verifier))))
    }
}

/// The credentials in an `authorization` header value, read exactly as
/// Corium's `Credentials::from_metadata` reads them (`Bearer <token>`).
#[must_use]
pub fn bearer(authorization: Option<&[u8]>) -> Credentials {
    Credentials {
        bearer: authorization
            .and_then(|value| std::str::from_utf8(value).ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::to_owned),
        client_cert_subject: None,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use corium_protocol::authz::AllowAll;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        auth: AuthFlags,
    }

    fn guard(args: &[&str]) -> Guard {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        cli.auth.guard(Arc::new(AllowAll)).unwrap()
    }

    fn with(token: &str) -> Credentials {
        bearer(Some(format!("Bearer {token}").as_bytes()))
    }

    #[test]
    fn the_default_is_stock_corium_s_dev_token_plus_anonymous() {
        let guard = guard(&[]);
        let operator = guard.authenticate(&with(DEFAULT_DEV_TOKEN)).unwrap();
        assert_eq!(operator.provider, "static-token");
        assert!(operator.has_role("admin"));
        // A data admin, as stock; not a fleet operator outside `dev`.
        assert!(!AuthFlags::default().is_operator(&operator));
        assert!(guard.authenticate(&bearer(None)).unwrap().is_anonymous());
        // An unrecognised token is admitted as anonymous, as stock does.
        assert!(guard.authenticate(&with("wrong")).unwrap().is_anonymous());
    }

    #[test]
    fn the_dev_token_is_an_operator_only_when_a_development_fleet_says_so() {
        let flags = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
                .unwrap()
                .auth
        };
        let dev = flags(&["--dev-token-operator"]);
        let principal = dev
            .guard(Arc::new(AllowAll))
            .unwrap()
            .authenticate(&with(DEFAULT_DEV_TOKEN))
            .unwrap();
        assert!(dev.is_operator(&principal));
        assert!(principal.has_role(DATA_ADMIN_ROLE));
        let bare = flags(&[]);
        let principal = bare
            .guard(Arc::new(AllowAll))
            .unwrap()
            .authenticate(&with(DEFAULT_DEV_TOKEN))
            .unwrap();
        assert!(!bare.is_operator(&principal));
    }

    #[test]
    fn a_serve_token_is_strict() {
        let guard = guard(&["--serve-token", "s3cret"]);
        let principal = guard.authenticate(&with("s3cret")).unwrap();
        assert!(principal.has_role("admin"));
        assert!(
            principal.has_role(DEFAULT_OPERATOR_ROLE),
            "a deployment's own token is its operator"
        );
        assert!(guard.authenticate(&with(DEFAULT_DEV_TOKEN)).is_err());
        assert!(guard.authenticate(&bearer(None)).is_err());
        assert!(guard.authenticate(&with("wrong")).is_err());
    }

    #[test]
    fn require_auth_keeps_the_dev_token_and_refuses_anonymous() {
        let guard = guard(&["--require-auth"]);
        assert!(guard.authenticate(&with(DEFAULT_DEV_TOKEN)).is_ok());
        assert!(guard.authenticate(&bearer(None)).is_err());
    }

    #[test]
    fn serve_open_admits_everyone_and_refuses_to_combine() {
        let guard = guard(&["--serve-open"]);
        assert!(guard.is_disabled());
        assert!(Cli::try_parse_from(["x", "--serve-open", "--serve-token", "t"]).is_err());
    }

    #[test]
    fn the_operator_is_the_role_holder_or_a_fleet_node() {
        let flags = AuthFlags::default();
        assert!(flags.is_operator(&Principal::new("oidc", "sre").with_role(DEFAULT_OPERATOR_ROLE)));
        assert!(!flags.is_operator(&Principal::new("static-token", "operator").with_role("admin")));
        assert!(flags.is_operator(&Principal::new("fleet-mtls", "node-1").with_role(FLEET_NODE_ROLE)));
        assert!(!flags.is_operator(&Principal::anonymous()));
        let custom = AuthFlags {
            operator_role: Some("sre".to_owned()),
            ..AuthFlags::default()
        };
        assert!(!custom.is_operator(&Principal::new("oidc", "x").with_role("admin")));
        assert!(custom.is_operator(&Principal::new("oidc", "x").with_role("sre")));
        let debug = format!(
            "{:?}",
            AuthFlags {
                serve_token: Some("s3cret".to_owned()),
                ..AuthFlags::default()
            }
        );
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn only_a_bearer_prefix_is_a_credential() {
        assert_eq!(bearer(Some(b"Bearer abc")).bearer.as_deref(), Some("abc"));
        assert_eq!(bearer(Some(b"Basic abc")).bearer, None);
        assert_eq!(bearer(Some(b"bearer abc")).bearer, None);
        assert_eq!(bearer(None).bearer, None);
    }

    #[test]
    fn an_unreadable_jwks_names_the_flag() {
        let cli = Cli::try_parse_from([
            "x",
            "--oidc-issuer",
            "https://issuer.example",
            "--oidc-jwks-file",
            "/nonexistent/jwks.json",
        ])
        .unwrap();
        let error = cli.auth.validate().unwrap_err();
        assert!(error.to_string().starts_with("--oidc-jwks-file"), "{error}");
    }
}
