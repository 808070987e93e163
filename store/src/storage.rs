//! The shared store as the `--storage` flag names it, and what Corium's
//! storage-backend registry needs to open it.

use corium_store::StorageConfig;

/// Where the shared store lives.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Storage {
    /// Corium's filesystem backend under the data directory.
    Filesystem,
    /// `PostgreSQL` (Corium's `postgres` backend).
    Postgres {
        /// The connection URL.
        url: String,
    },
    /// An S3 bucket with conditional writes (Corium's `s3` backend).
    S3 {
        /// The bucket.
        bucket: String,
        /// Key prefix inside the bucket ("" for none).
        prefix: String,
        /// An S3-compatible endpoint (`--s3-endpoint`), else AWS's.
        endpoint: Option<String>,
        /// The region.
        region: String,
    },
}

/// A `--storage` value that names no storage the fleet can open.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
pub enum StorageFlagError {
    /// `s3://` without a bucket.
    #[error("storage {0:?}: the S3 bucket is missing (s3://BUCKET[/PREFIX])")]
    MissingBucket(String),
    /// Not one of the accepted forms.
    #[error(
        "unknown storage {0:?}: expected `filesystem`, `postgres://USER@HOST:PORT/DB` or `s3://BUCKET[/PREFIX]`"
    )]
    Unknown(String),
}

impl Storage {
    /// Parses the `--storage` value.
    ///
    /// # Errors
    /// [`StorageFlagError`], naming the accepted forms.
    pub fn parse(
        text: &str,
        s3_endpoint: Option<String>,
        s3_region: Option<String>,
    ) -> Result<Self, StorageFlagError> {
        if text == "filesystem" || text == "fs" {
            return Ok(Self::Filesystem);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres { url: text.to_owned() });
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StorageFlagError::MissingBucket(text.to_owned()));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
                endpoint: s3_endpoint,
                region: s3_region.unwrap_or_else(|| "us-east-1".to_owned()),
            });
        }
        Err(StorageFlagError::Unknown(text.to_owned()))
    }

    /// The storage-backend kind in Corium's registry.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Filesystem => "filesystem",
            Self::Postgres { .. } => "postgres",
            Self::S3 { .. } => "s3",
        }
    }

    /// The backend configuration Corium's registry opens it with (S3
    /// credentials from the standard `AWS_*` variables). The filesystem's
    /// root is filled in by [`open`](mod@crate::open) from the data directory.
    #[must_use]
    pub fn config(&self) -> StorageConfig {
        let value = match self {
            Self::Filesystem => serde_json::json!({}),
            Self::Postgres { url } => serde_json::json!({ "connection_string": url }),
            Self::S3 {
                bucket,
                prefix,
                endpoint,
                region,
            } => serde_json::json!({
                "bucket": bucket,
                "prefix": prefix,
                "region": region,
                "endpoint_url": endpoint,
                "access_key_id": std::env::var("AWS_ACCESS_KEY_ID").ok(),
                "secret_access_key": std::env::var("AWS_SECRET_ACCESS_KEY").ok(),
                "session_token": std::env::var("AWS_SESSION_TOKEN").ok(),
            }),
        };
        StorageConfig::from_value(value).unwrap_or_else(|_| unreachable!("a JSON object"))
    }

    /// A description safe to print (no credentials).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Filesystem => "filesystem".to_owned(),
            Self::Postgres { url } => {
                let host = url.rsplit('@').next().unwrap_or(url);
                format!("postgres://…@{host}")
            }
            Self::S3 { bucket, prefix, .. } => format!("s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_describes_itself_without_credentials() {
        assert_eq!(Storage::parse("fs", None, None), Ok(Storage::Filesystem));
        let postgres = Storage::parse("postgres://fleet:secret@db:5432/corium", None, None).unwrap();
        assert_eq!(postgres.kind(), "postgres");
        assert!(!postgres.describe().contains("secret"), "{}", postgres.describe());
        let s3 = Storage::parse("s3://bucket/fleet", Some("http://127.0.0.1:8333".into()), None).unwrap();
        assert_eq!(s3.describe(), "s3://bucket/fleet");
        assert!(matches!(&s3, Storage::S3 { region, .. } if region == "us-east-1"));
        assert_eq!(
            Storage::parse("s3://", None, None),
            Err(StorageFlagError::MissingBucket("s3://".into()))
        );
        let unknown = Storage::parse("mysql://x", None, None).unwrap_err();
        assert_eq!(unknown, StorageFlagError::Unknown("mysql://x".into()));
        assert!(unknown.to_string().contains("expected"), "{unknown}");
    }
}
