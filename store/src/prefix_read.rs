//! Reading every root under a prefix together with its bytes, in as few
//! storage round trips as the backend allows: one query on `PostgreSQL`
//! (`SELECT name, data … WHERE name LIKE 'prefix%'`, served by the listing
//! index), a listing and a few concurrent reads elsewhere.
//!
//! For callers about to read all of them anyway: a database's log records
//! when it is activated (the node's read-ahead). The result is bounded in
//! bytes; a read that stops at the bound says so, and the caller lists the
//! rest itself.
//!
//! Also the names under a prefix that sort after a given one
//! ([`PrefixRead::list_after`]): one short page on S3 (`StartAfter`) for a
//! caller that holds an earlier listing of a log that only grows at its
//! end; elsewhere a listing, filtered.
//!
//! [`Opened`] is a store with its bulk reader, as the backends open them.

use std::sync::Arc;

use async_trait::async_trait;
use corium_store::{FullStore, StoreError};
use futures::{StreamExt as _, TryStreamExt as _};

/// Roots read under one prefix.
#[derive(Debug, Default)]
pub struct PrefixRows {
    /// `(name, bytes)` sorted by name: a prefix of the full listing when
    /// `complete` is false.
    pub rows: Vec<(String, Vec<u8>)>,
    /// Whether `rows` holds every root under the prefix (the read did not
    /// stop at its byte bound).
    pub complete: bool,
}

impl PrefixRows {
    /// Adds a row unless it would pass `max_bytes` in all; `false` once the
    /// bound is reached (the read stops, `complete` stays false).
    fn take(&mut self, total: &mut usize, max_bytes: usize, name: String, bytes: Vec<u8>) -> bool {
        *total += bytes.len();
        if *total > max_bytes {
            return false;
        }
        self.rows.push((name, bytes));
        true
    }
}

/// Reads the roots under a prefix with their bytes.
#[async_trait]
pub trait PrefixRead: Send + Sync {
    /// The roots whose names start with `prefix`, in name order, until their
    /// bytes would pass `max_bytes`.
    ///
    /// # Errors
    /// The store's failure.
    async fn read_prefix(&self, prefix: &str, max_bytes: usize) -> Result<PrefixRows, StoreError>;

    /// The names under `prefix` that sort after `after` (byte order), in
    /// that order.
    ///
    /// # Errors
    /// The store's failure.
    async fn list_after(&self, prefix: &str, after: &str) -> Result<Vec<String>, StoreError>;
}

/// An opened store and the way to read many of its roots at once.
#[derive(Clone)]
pub struct Opened {
    /// The store, as Corium's backend opened it.
    pub store: Arc<dyn FullStore>,
    /// Bulk reads of the roots under a prefix: one query on `PostgreSQL`,
    /// listing and concurrent reads elsewhere.
    pub prefix_read: Arc<dyn PrefixRead>,
}

/// `names` sorted, from the first one after `after`.
#[must_use]
pub fn after(mut names: Vec<String>, after: &str) -> Vec<String> {
    names.sort();
    let first = names.partition_point(|name| name.as_str() <= after);
    names.split_off(first)
}

/// Reads in flight at once where a backend has no bulk read.
const CONCURRENT_READS: usize = 8;

/// Any store: one listing, then the roots read a few at a time.
pub struct ListThenRead(pub Arc<dyn FullStore>);

#[async_trait]
impl PrefixRead for ListThenRead {
    async fn read_prefix(&self, prefix: &str, max_bytes: usize) -> Result<PrefixRows, StoreError> {
        let mut names = self.0.list_roots(prefix).await?;
        names.sort();
        let store = &self.0;
        let mut reads = futures::stream::iter(names)
            .map(|name| async move { store.get_root(&name).await.map(|bytes| (name, bytes)) })
            .buffered(CONCURRENT_READS);
        let mut read = PrefixRows::default();
        let mut total = 0;
        while let Some((name, bytes)) = reads.try_next().await? {
            // Gone since the listing (a deleted database): not a root now.
            let Some(bytes) = bytes else { continue };
            if !read.take(&mut total, max_bytes, name, bytes) {
                return Ok(read);
            }
        }
        read.complete = true;
        Ok(read)
    }

    async fn list_after(&self, prefix: &str, after_name: &str) -> Result<Vec<String>, StoreError> {
        Ok(after(self.0.list_roots(prefix).await?, after_name))
    }
}

/// `PostgreSQL`: one query, rows streamed until the bound.
pub struct PostgresPrefixRead(pub deadpool_postgres::Pool);

/// `text` with `LIKE`'s metacharacters escaped (the default escape, `\`).
fn escape_like(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

fn backend(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        kind: "postgres".into(),
        detail: error.to_string(),
    }
}

#[async_trait]
impl PrefixRead for PostgresPrefixRead {
    async fn read_prefix(&self, prefix: &str, max_bytes: usize) -> Result<PrefixRows, StoreError> {
        let client = self.0.get().await.map_err(backend)?;
        let pattern = format!("{}%", escape_like(prefix));
        let rows = client
            .query_raw(
                "SELECT name, data FROM corium_roots WHERE name LIKE $1 ORDER BY name",
                [&pattern],
            )
            .await
            .map_err(backend)?;
        let mut rows = std::pin::pin!(rows);
        let mut read = PrefixRows::default();
        let mut total = 0;
        while let Some(row) = rows.try_next().await.map_err(backend)? {
            let name: String = row.try_get(0).map_err(backend)?;
            let bytes: Vec<u8> = row.try_get(1).map_err(backend)?;
            if !read.take(&mut total, max_bytes, name, bytes) {
                // Dropping the stream ends the query; the connection goes
                // back to the pool ready for the next one.
                return Ok(read);
            }
        }
        read.complete = true;
        Ok(read)
    }

    /// The listing query, filtered here: `name > $2` in SQL would compare
    /// under the column's collation, not in byte order. An indexed listing
    /// of one database's log is cheap on `PostgreSQL`.
    async fn list_after(&self, prefix: &str, after_name: &str) -> Result<Vec<String>, StoreError> {
        let client = self.0.get().await.map_err(backend)?;
        let pattern = format!("{}%", escape_like(prefix));
        let rows = client
            .query("SELECT name FROM corium_roots WHERE name LIKE $1", &[&pattern])
            .await
            .map_err(backend)?;
        let names = rows
            .iter()
            .map(|row| row.try_get::<_, String>(0).map_err(backend))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(after(names, after_name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_metacharacters_are_escaped() {
        assert_eq!(escape_like("log:a_b%c\\d:v"), "log:a\\_b\\%c\\\\d:v");
    }

    #[tokio::test]
    async fn list_then_read_returns_the_prefix_in_order_and_stops_at_the_bound() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        for (name, bytes) in [
            ("log:a:v2", "bb"),
            ("log:a:v1", "a"),
            ("log:ab:v1", "x"),
            ("log:a:v3", "ccc"),
        ] {
            store.cas_root(name, None, bytes.as_bytes()).await.unwrap();
        }
        let reader = ListThenRead(Arc::clone(&store));
        let all = reader.read_prefix("log:a:", 1 << 20).await.unwrap();
        assert!(all.complete);
        let names: Vec<&str> = all.rows.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["log:a:v1", "log:a:v2", "log:a:v3"]);
        assert_eq!(all.rows[2].1, b"ccc");
        let bounded = reader.read_prefix("log:a:", 3).await.unwrap();
        assert!(!bounded.complete);
        assert_eq!(bounded.rows.len(), 2, "1 + 2 bytes fit, the third would pass 3");
        assert_eq!(
            reader.list_after("log:a:", "log:a:v1").await.unwrap(),
            ["log:a:v2", "log:a:v3"]
        );
        assert_eq!(
            reader.list_after("log:a:", "log:a:v15").await.unwrap(),
            ["log:a:v2", "log:a:v3"],
            "byte order, not a name that exists"
        );
        assert!(reader.list_after("log:a:", "log:a:v3").await.unwrap().is_empty());
    }
}
