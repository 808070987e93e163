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

use async_trait::async_trait;
use corium_store::{FullStore, StoreError};
use corium_store_s3::S3BlobStore;

use crate::prefix_read::{ListThenRead, PrefixRead, PrefixRows};

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
) -> Result<crate::prefix_read::Opened, StoreError> {
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
    let store: Arc<dyn FullStore> = Arc::new(S3BlobStore::from_client(client.clone(), bucket, prefix).await?);
    Ok(crate::prefix_read::Opened {
        prefix_read: Arc::new(S3PrefixRead {
            reads: ListThenRead(Arc::clone(&store)),
            client,
            bucket: bucket.to_owned(),
            roots: format!(
                "{}roots/",
                corium_store_s3::normalize_s3_prefix(prefix.to_owned())
            ),
        }),
        store,
    })
}

/// Bulk reads as any store's; listings after a name with `StartAfter`, so
/// a caller that holds most of a log lists one page, not all of them.
struct S3PrefixRead {
    reads: ListThenRead,
    client: aws_sdk_s3::Client,
    bucket: String,
    /// Where Corium's `S3BlobStore` keeps roots: `{prefix}roots/{name}`.
    roots: String,
}

fn backend(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        kind: "s3".into(),
        detail: error.to_string(),
    }
}

#[async_trait]
impl PrefixRead for S3PrefixRead {
    async fn read_prefix(&self, prefix: &str, max_bytes: usize) -> Result<PrefixRows, StoreError> {
        self.reads.read_prefix(prefix, max_bytes).await
    }

    async fn list_after(&self, prefix: &str, after: &str) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        let mut continuation = None;
        loop {
            let mut request = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(format!("{}{prefix}", self.roots))
                .start_after(format!("{}{after}", self.roots));
            if let Some(token) = continuation.take() {
                request = request.continuation_token(token);
            }
            let page = request.send().await.map_err(backend)?;
            names.extend(
                page.contents()
                    .iter()
                    .filter_map(|object| object.key()?.strip_prefix(&self.roots).map(str::to_owned)),
            );
            continuation = page.next_continuation_token().map(str::to_owned);
            if continuation.is_none() {
                break;
            }
        }
        // S3 lists keys in UTF-8 byte order; the filter covers a server
        // that does not honour `StartAfter`.
        Ok(crate::prefix_read::after(names, after))
    }
}
