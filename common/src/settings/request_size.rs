//! The request-size limit, one flag for both tiers: the ingress refuses at
//! its door exactly what a node would refuse, so it never buffers and
//! forwards a request only for the node to turn it away.

use serde::{Deserialize, Serialize};

use crate::process::ConfigError;

/// The default limit: tonic's default decoding limit, which is what a stock
/// Corium transactor accepts (Corium 0.1.90 sets none of its own).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The smallest limit either tier takes.
pub const MIN_MAX_REQUEST_BYTES: usize = 1024;

/// The largest limit either tier takes (the ingress buffers a request whole
/// to replay it, so this bounds its memory per call).
pub const MAX_MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;

/// The gRPC frame header before each message (a compressed flag and a
/// four-byte length): a request body holds its message and this.
pub const GRPC_FRAME_HEADER: usize = 5;

/// `--max-request-bytes`.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestSizeFlags {
    /// The largest request message a client may send, in bytes
    /// (1024–268435456). Give the ingress and the nodes the same value (the
    /// chart's `fleet.maxRequestBytes` does): a larger request is refused
    /// `RESOURCE_EXHAUSTED` at the ingress, and by the node itself when
    /// sent to it directly [default: 4194304, a stock transactor's limit].
    #[arg(long)]
    pub max_request_bytes: Option<usize>,
}

impl RequestSizeFlags {
    /// The limit, in bytes of one request message.
    ///
    /// # Errors
    /// Outside 1024–268435456, naming the flag and the range.
    pub fn validate(&self) -> Result<usize, ConfigError> {
        let bytes = self.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
        if (MIN_MAX_REQUEST_BYTES..=MAX_MAX_REQUEST_BYTES).contains(&bytes) {
            Ok(bytes)
        } else {
            Err(ConfigError::from(format!(
                "--max-request-bytes {bytes}: must be between {MIN_MAX_REQUEST_BYTES} and {MAX_MAX_REQUEST_BYTES}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_defaults_to_a_stock_transactors_and_is_bounded() {
        let flags = |bytes| RequestSizeFlags {
            max_request_bytes: bytes,
        };
        assert_eq!(flags(None).validate().unwrap(), 4 * 1024 * 1024);
        assert_eq!(flags(Some(1024)).validate().unwrap(), 1024);
        assert_eq!(
            flags(Some(MAX_MAX_REQUEST_BYTES)).validate().unwrap(),
            MAX_MAX_REQUEST_BYTES
        );
        for bad in [1023, MAX_MAX_REQUEST_BYTES + 1] {
            let error = flags(Some(bad)).validate().unwrap_err().to_string();
            assert!(
                error.contains("--max-request-bytes") && error.contains("268435456"),
                "{error}"
            );
        }
    }
}
