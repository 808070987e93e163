//! Reads through the fleet's read replicas (`corium.v1.PeerServer`), with
//! read-your-writes.
//!
//! A read goes to a read replica of the database, which follows the owner a
//! few milliseconds behind. So that a read never misses a write this client
//! made, every read carries `corium-min-basis`: the highest basis this
//! [`Client`](crate::Client) has seen committed in that database (by
//! [`Database::transact`](crate::Database::transact) and its siblings). The
//! replica waits, within the call's deadline, until it has applied that
//! basis, and otherwise refuses `UNAVAILABLE` with a retry hint, which the
//! SDK retries like any "retry later". A read never answers from behind it.
//!
//! The basis is per client, shared by its clones: two clients (or two
//! processes) see each other's writes only once the replica has them; to
//! read at least as far as a basis learned elsewhere, use
//! [`Database::query_at_least`].

use corium_fleet_wire::metadata;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use corium_query::edn::Edn;

use crate::client::Database;
use crate::error::Error;

/// Reassembles a chunked query answer as Corium's peer server chunks it: a
/// tuple or scalar is one chunk; a relation or collection is the rows of
/// every chunk.
fn assemble(chunks: &[pb::QueryResultChunk]) -> Result<Edn, Error> {
    let decode = |bytes: &[u8]| codec::decode_edn(bytes).map_err(|error| Error::Protocol(error.to_string()));
    match chunks.first().map(pb::QueryResultChunk::shape) {
        None => Ok(Edn::Vector(Vec::new())),
        Some(pb::ResultShape::Tuple | pb::ResultShape::Scalar) => decode(&chunks[0].rows),
        Some(_) => {
            let mut rows = Vec::new();
            for chunk in chunks {
                match decode(&chunk.rows)? {
                    Edn::Vector(items) => rows.extend(items),
                    other => {
                        return Err(Error::Protocol(format!(
                            "a result chunk is not a vector: {other}"
                        )));
                    }
                }
            }
            Ok(Edn::Vector(rows))
        }
    }
}

impl Database {
    /// The highest basis this client has seen committed in this database
    /// (0: none), which every read of it waits for.
    #[must_use]
    pub fn written_basis(&self) -> u64 {
        self.client.written.get(&self.name)
    }

    /// Runs a Datalog query (EDN text) with EDN `args` against the current
    /// database, at least as far as this client's own writes.
    ///
    /// # Errors
    /// [`Error::Config`] for text that is not EDN; the fleet's status after
    /// retries.
    pub async fn query_edn(&self, query: &str, args: &[&str]) -> Result<Edn, Error> {
        self.query_at_least(query, args, 0).await
    }

    /// [`Database::query_edn`], at least as far as `basis` too (a basis
    /// learned from another client, say).
    ///
    /// # Errors
    /// As [`Database::query_edn`]; [`Error::Status`] with kind
    /// `RetryLater` when no replica reached `basis` within the budget.
    pub async fn query_at_least(&self, query: &str, args: &[&str], basis: u64) -> Result<Edn, Error> {
        let read = |text: &str| {
            corium_query::edn::read_one(text).map_err(|error| Error::Config(format!("{text:?}: {error}")))
        };
        let query = codec::encode_edn(&read(query)?);
        let args = codec::encode_edn(&Edn::Vector(
            args.iter().map(|arg| read(arg)).collect::<Result<_, _>>()?,
        ));
        let at_least = basis.max(self.written_basis());
        let timeout = self.client.config.request_timeout;
        let chunks = self
            .client
            .retrying(|| {
                let mut peer = PeerServerClient::new(self.client.authorized());
                let message = pb::QueryRequest {
                    dbs: vec![pb::DbViewSpec {
                        db: self.name.clone(),
                        view: None,
                    }],
                    query: query.clone(),
                    args: args.clone(),
                    fuel: 0,
                };
                async move {
                    let mut request = crate::client::request(message, &self.name, timeout)?;
                    request
                        .metadata_mut()
                        .insert(metadata::MIN_BASIS, at_least.into());
                    let mut stream = peer.query(request).await?.into_inner();
                    let mut chunks = Vec::new();
                    while let Some(chunk) = stream.message().await? {
                        chunks.push(chunk);
                    }
                    Ok(chunks)
                }
            })
            .await
            .map_err(|(status, _)| Error::from_status(status))?
            .0;
        assemble(&chunks)
    }

    /// The database's counts (`DbStats`) at least as far as this client's
    /// own writes.
    ///
    /// # Errors
    /// The fleet's status after retries.
    pub async fn stats(&self) -> Result<pb::DbStatsResponse, Error> {
        let at_least = self.written_basis();
        let timeout = self.client.config.request_timeout;
        self.client
            .retrying(|| {
                let mut peer = PeerServerClient::new(self.client.authorized());
                let message = pb::DbStatsRequest {
                    db: Some(pb::DbViewSpec {
                        db: self.name.clone(),
                        view: None,
                    }),
                };
                async move {
                    let mut request = crate::client::request(message, &self.name, timeout)?;
                    request
                        .metadata_mut()
                        .insert(metadata::MIN_BASIS, at_least.into());
                    peer.db_stats(request).await.map(tonic::Response::into_inner)
                }
            })
            .await
            .map(|(stats, _)| stats)
            .map_err(|(status, _)| Error::from_status(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_reassemble_by_shape() {
        let chunk = |shape: pb::ResultShape, rows: Edn| pb::QueryResultChunk {
            shape: shape.into(),
            rows: codec::encode_edn(&rows),
            last: false,
        };
        let relation = [
            chunk(pb::ResultShape::Relation, Edn::Vector(vec![Edn::Long(1)])),
            chunk(pb::ResultShape::Relation, Edn::Vector(vec![Edn::Long(2)])),
        ];
        assert_eq!(
            assemble(&relation).unwrap(),
            Edn::Vector(vec![Edn::Long(1), Edn::Long(2)])
        );
        let scalar = [chunk(pb::ResultShape::Scalar, Edn::Long(3))];
        assert_eq!(assemble(&scalar).unwrap(), Edn::Long(3));
        assert_eq!(assemble(&[]).unwrap(), Edn::Vector(Vec::new()));
        let broken = [chunk(pb::ResultShape::Relation, Edn::Long(4))];
        assert!(matches!(assemble(&broken), Err(Error::Protocol(_))));
    }
}
