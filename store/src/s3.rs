//! Opening S3 the fleet's way: Corium's `S3BlobStore` (the same keys, the
//! same conditional writes) over an SDK client whose retries the fleet
//! states.
//!
//! Corium builds its client with the SDK's defaults: three attempts, the
//! backoff starting at one second. A node decides ownership in lease time
//! (a TTL of a few seconds, renewals every third of it), and retries itself
//! where a retry is safe; a storage call that sits in the SDK's backoff
//! across a lease boundary holds up a cell's reset and release long after
//! the network healed (seen in `foundation.rs`'s S3 partition test: up to
//! 0.8 s of "no live owner" after the heal, none with one attempt). Here the
//! SDK tries [`ATTEMPTS`] times with a short backoff; everything else
//! (credentials from the standard chain, the region, path-style addressing
//! for an explicit endpoint) is as Corium's own.

use std::sync::Arc;
use std::time::Duration;

use corium_store::StoreError;
use corium_store_s3::S3BlobStore;

/// Attempts per S3 request, the first included.
pub const ATTEMPTS: u32 = 2;

/// Opens `s3://bucket/prefix` at `endpoint` (AWS's when `None`) in
/// `region`, with a bulk prefix reader over the same store.
///
/// # Errors
/// The bucket cannot be reached.
pub async fn open(
    bucket: &str,
    prefix: &str,
    endpoint: Option<&str>,
    region: &str,
) -> Result<crate::Opened, StoreError> {
    let retry = aws_config::retry::RetryConfig::standard()
        .with_max_attempts(ATTEMPTS)
        .with_initial_backoff(Duration::from_millis(50))
        .with_max_backoff(Duration::from_millis(250));
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(region.to_owned()))
        .retry_config(retry)
        .load()
        .await;
    let mut s3 = aws_sdk_s3::config::Builder::from(&config);
    if let Some(endpoint) = endpoint {
        // An S3-compatible server reached by host or address: path-style
        // keys, as Corium's own client uses for an explicit endpoint.
        s3 = s3.endpoint_url(endpoint).force_path_style(true);
    }
    let client = aws_sdk_s3::Client::from_conf(s3.build());
    let store: Arc<dyn corium_store::FullStore> =
        Arc::new(S3BlobStore::from_client(client, bucket, prefix).await?);
    Ok(crate::Opened {
        prefix_read: Arc::new(crate::prefix_read::ListThenRead(Arc::clone(&store))),
        store,
    })
}
