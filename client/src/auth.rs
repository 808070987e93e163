//! The bearer token every call presents: `authorization: Bearer <token>`,
//! the metadata stock Corium reads (`corium_protocol::auth`).

use tonic::metadata::{Ascii, MetadataValue};

/// The metadata key a bearer token travels under.
pub const AUTHORIZATION: &str = "authorization";

/// A tonic interceptor that attaches `authorization: Bearer <token>` to
/// every request, or nothing when there is no token (an anonymous caller).
///
/// The SDK puts one on every call it makes; [`crate::Client::interceptor`]
/// hands it out for Corium's own generated clients on
/// [`crate::Client::channel`]. The value is parsed once, when the client is
/// made, so attaching it cannot fail, and it is marked sensitive (HTTP/2
/// never adds it to a header-compression table). Its `Debug` output never
/// shows the token.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

/// Why a token cannot be sent.
#[derive(Debug, thiserror::Error)]
#[error("the token is not valid metadata (visible ASCII only)")]
pub struct InvalidToken;

impl Bearer {
    /// The interceptor for `token` (`None`: anonymous, no header).
    ///
    /// # Errors
    /// [`InvalidToken`] when `Bearer <token>` is not metadata a server can
    /// read as text (a control character, a newline, non-ASCII text).
    pub fn new(token: Option<&str>) -> Result<Self, InvalidToken> {
        token
            .map(|token| {
                let mut value: MetadataValue<Ascii> =
                    format!("Bearer {token}").parse().map_err(|_| InvalidToken)?;
                // Metadata admits bytes a server cannot read back as text
                // (and so would not see as a token): refuse those too.
                value.to_str().map_err(|_| InvalidToken)?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()
            .map(Self)
    }

    /// Whether a token is attached (`false`: anonymous).
    #[must_use]
    pub const fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Attaches the token to `request` (replacing any `authorization` it
    /// had); an anonymous interceptor leaves the request as it is.
    pub fn attach<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(AUTHORIZATION, value.clone());
        }
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Bearer")
            .field(&self.0.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        self.attach(&mut request);
        Ok(request)
    }
}

/// The channel every SDK call is made on: the fleet address's channel, with
/// the configured bearer token attached to each request.
pub(crate) type Authorized =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>;

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor as _;

    use super::*;

    fn header(bearer: &mut Bearer) -> Option<MetadataValue<Ascii>> {
        let request = bearer.call(tonic::Request::new(())).unwrap();
        request.metadata().get(AUTHORIZATION).cloned()
    }

    #[test]
    fn a_token_is_attached_as_a_sensitive_bearer_header() {
        let mut bearer = Bearer::new(Some("s3cret")).unwrap();
        assert!(bearer.is_set());
        let value = header(&mut bearer).expect("the header is attached");
        assert_eq!(value.to_str().unwrap(), "Bearer s3cret");
        assert!(value.is_sensitive());
    }

    #[test]
    fn a_token_replaces_an_authorization_already_there() {
        let mut request = tonic::Request::new(());
        request
            .metadata_mut()
            .insert(AUTHORIZATION, "Bearer old".parse().unwrap());
        Bearer::new(Some("new")).unwrap().attach(&mut request);
        let values: Vec<_> = request.metadata().get_all(AUTHORIZATION).iter().collect();
        assert_eq!(values.len(), 1);
        assert_eq!(values[0].to_str().unwrap(), "Bearer new");
    }

    #[test]
    fn no_token_sends_no_header() {
        let mut bearer = Bearer::new(None).unwrap();
        assert!(!bearer.is_set());
        assert!(header(&mut bearer).is_none());
        assert!(header(&mut Bearer::default()).is_none());
    }

    #[test]
    fn a_token_that_is_not_metadata_is_refused_up_front() {
        assert!(Bearer::new(Some("two\nlines")).is_err());
        assert!(Bearer::new(Some("caf\u{e9}")).is_err());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let shown = format!("{:?}", Bearer::new(Some("s3cret")).unwrap());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
    }
}
