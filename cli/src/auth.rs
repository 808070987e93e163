//! The bearer token the CLI presents, resolved exactly as the stock `corium`
//! CLI resolves it (`--token`, else `CORIUM_TOKEN`, else Corium's
//! development token; `--token ""` connects anonymously), and the hint
//! printed when the fleet refuses it.

use anyhow::bail;
use corium_protocol::auth::{DEFAULT_DEV_TOKEN, TokenInterceptor};

/// The bearer token to present: the flag / `CORIUM_TOKEN` value when set,
/// the shared development token ([`DEFAULT_DEV_TOKEN`]) when unset, or
/// `None` when the value is present but empty (`--token ""`): connect
/// anonymously. Stock `corium`'s `resolve_client_token`, verbatim.
pub(crate) fn resolve_token(token: Option<&str>) -> Option<String> {
    match token {
        Some("") => None,
        Some(value) => Some(value.to_owned()),
        None => Some(DEFAULT_DEV_TOKEN.to_owned()),
    }
}

/// The interceptor attaching `authorization: Bearer <token>` for the
/// `--token` value (resolved by [`resolve_token`]) to every call.
///
/// # Errors
/// The token cannot be sent as metadata a server reads as text (a control
/// character, a newline, non-ASCII text); checked here so that the
/// interceptor never fails a call. The token itself is never printed.
pub(crate) fn interceptor(token: Option<&str>) -> anyhow::Result<TokenInterceptor> {
    let token = resolve_token(token);
    if let Some(token) = &token {
        let valid = format!("Bearer {token}")
            .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
            .is_ok_and(|value| value.to_str().is_ok());
        if !valid {
            bail!("the --token / CORIUM_TOKEN value is not valid metadata (visible ASCII only)");
        }
    }
    Ok(TokenInterceptor::new(token))
}

/// What to tell the operator when the call failed because the fleet refused
/// the credentials: decided on the gRPC status code anywhere in the error's
/// chain (`UNAUTHENTICATED`, `PERMISSION_DENIED`), never on message text.
pub(crate) fn refusal_hint(error: &anyhow::Error) -> Option<&'static str> {
    let status = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<tonic::Status>())?;
    match status.code() {
        tonic::Code::Unauthenticated => Some(
            "the fleet refused the credentials: pass --token or set CORIUM_TOKEN \
             (unset, the development token is sent; --token \"\" sends none)",
        ),
        tonic::Code::PermissionDenied => Some(
            "the fleet accepted the credentials but does not allow them this call: \
             pass --token or set CORIUM_TOKEN to a token that is allowed it",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;
    use clap::Parser as _;
    use tonic::service::Interceptor as _;

    use super::*;

    #[test]
    fn the_token_resolves_as_stock_corium_resolves_it() {
        assert_eq!(resolve_token(None).as_deref(), Some(DEFAULT_DEV_TOKEN));
        assert_eq!(resolve_token(Some("")), None);
        assert_eq!(resolve_token(Some("s3cret")).as_deref(), Some("s3cret"));
    }

    fn header(token: Option<&str>) -> Option<String> {
        let request = interceptor(token).unwrap().call(tonic::Request::new(())).unwrap();
        request
            .metadata()
            .get("authorization")
            .map(|value| value.to_str().unwrap().to_owned())
    }

    #[test]
    fn the_interceptor_sends_the_resolved_token() {
        assert_eq!(header(None), Some(format!("Bearer {DEFAULT_DEV_TOKEN}")));
        assert_eq!(header(Some("")), None);
        assert_eq!(header(Some("s3cret")).as_deref(), Some("Bearer s3cret"));
    }

    #[test]
    fn a_token_that_is_not_metadata_is_refused_without_echoing_it() {
        for token in ["two\nlines", "caf\u{e9}"] {
            let error = interceptor(Some(token)).err().expect("refused").to_string();
            assert!(!error.contains(token), "{error}");
        }
    }

    #[test]
    fn the_hint_follows_the_status_code_not_the_message() {
        let failed = |status: tonic::Status| {
            Err::<(), _>(status)
                .context("node status from http://127.0.0.1:1")
                .unwrap_err()
        };
        let unauthenticated = refusal_hint(&failed(tonic::Status::unauthenticated("x")));
        let denied = refusal_hint(&failed(tonic::Status::permission_denied("x")));
        assert!(unauthenticated.is_some_and(|hint| hint.contains("CORIUM_TOKEN")));
        assert!(denied.is_some_and(|hint| hint.contains("CORIUM_TOKEN")));
        assert_ne!(unauthenticated, denied);
        let worded = tonic::Status::unavailable("unauthenticated: permission denied");
        assert_eq!(refusal_hint(&failed(worded)), None);
        assert_eq!(refusal_hint(&anyhow::anyhow!("unauthenticated")), None);
    }

    #[test]
    fn every_client_command_takes_the_token_flag() {
        for command in [
            &["status"][..],
            &["where", "orders"],
            &["handoff", "orders", "--to", "node-2"],
            &["request-status", "orders", "id"],
        ] {
            let mut line = vec!["corium-fleet"];
            line.extend_from_slice(command);
            line.extend_from_slice(&["--token", ""]);
            let cli = crate::Cli::try_parse_from(&line).unwrap();
            let node = match &cli.command {
                crate::Command::Status(args) => &args.node,
                crate::Command::Where(args) => &args.node,
                crate::Command::Handoff(args) => &args.node,
                crate::Command::RequestStatus(args) => &args.node,
                _ => unreachable!(),
            };
            assert_eq!(node.token.as_deref(), Some(""), "{line:?}");
            assert_eq!(resolve_token(node.token.as_deref()), None, "{line:?}");
        }
    }

    #[test]
    fn the_help_documents_the_token_and_never_shows_its_value() {
        use clap::CommandFactory as _;
        let mut command = crate::Cli::command();
        let help = command
            .find_subcommand_mut("status")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--token <TOKEN>"), "{help}");
        assert!(help.contains("CORIUM_TOKEN"), "{help}");
        assert!(help.contains("--token \"\""), "{help}");
        assert!(help.contains("DEFAULT_DEV_TOKEN"), "{help}");
        assert!(!help.contains("CORIUM_TOKEN="), "{help}");
    }
}
