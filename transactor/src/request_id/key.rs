//! The request key: one `bytes` value that is the whole request record of
//! most transactions (`:fleet.request/key`, `:db.unique/value`, on the
//! transaction entity).
//!
//! ```text
//! key   := "fr2" id(16) digest(8) flags(1) body [owner(8)]
//! flags := bit 0: the caller named "datomic.tx"; bits 1-2: the mode;
//!          bit 3: an owner follows the body
//! owner := the first 8 bytes of a SHA-256 of the principal that sent the
//!          id (`record::Owner`): the id is that principal's
//! body  := (mode none)     nothing: no tempid of the caller's own
//!          (mode entity)   name-len(varint) name identity
//!          (mode bindings) nothing: binding entities carry the tempids
//!          (mode fenced)   nothing: a status query's "never will commit"
//! identity := 0 | 1 attr(8, big-endian) value
//! value    := tag(1) payload (string, long, instant, uuid, bool, bytes, ref)
//! ```
//!
//! Keys of one id share their first 19 bytes, so the AVET index finds a
//! request id with one range seek whatever its digest. The digest is the
//! first 8 bytes of the request's SHA-256: it tells a resend from a reuse of
//! the id by another request (a collision needs 2^64 tries by one client
//! reusing one id).
//!
//! A key with an owner is not readable by a node that predates owners (its
//! decoder refuses bytes past the body), so nodes write owners only once
//! every live member says it reads them (the registry's feature list,
//! `docs/upgrading.md`).

use corium_core::{EntityId, Value};

/// The key's magic prefix (format 2 of the request record).
const MAGIC: &[u8; 3] = b"fr2";
/// Bytes before the flags: magic, id, digest.
#[cfg(test)]
pub(crate) const PREFIX_LEN: usize = 3 + 16 + 8;
/// The longest identity value kept in a key (its encoding: tag, length,
/// bytes). A key is one more value in four of Corium's covering indexes for
/// the database's whole life: a longer identity repeated in it doubled an
/// owner's memory for transactions with ~200-byte identities (design note
/// 0021), so a longer one is not kept (`record::augmented` decides what is
/// recorded instead). A UUID, a long or a short name fits.
const MAX_IDENTITY_BYTES: usize = 40;

const TX_NAMED: u8 = 1;
const MODE_SHIFT: u8 = 1;
const MODE_MASK: u8 = 0b110;
const OWNED: u8 = 0b1000;
/// The bytes of an owner tag.
pub(crate) const OWNER_LEN: usize = 8;

/// How the key binds the caller's tempids.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Mode {
    /// The caller named no tempid (or only `"datomic.tx"`).
    None,
    /// One tempid, the only entity the transaction writes about: its
    /// entity is the one the log record's datoms name besides the
    /// transaction; when the transaction asserted nothing new about it (an
    /// upsert of facts already true), the entity its identity attribute
    /// named at that `t`.
    Entity {
        /// The tempid's name.
        name: String,
        /// Its first identity attribute and value, if it has one.
        identity: Option<(EntityId, Value)>,
    },
    /// Binding entities (one ref each) carry the tempids.
    Bindings,
    /// A fence marker: nothing committed under the id, and nothing will.
    Fenced,
}

/// A decoded key.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Key {
    /// The request id.
    pub id: u128,
    /// The first 8 bytes of the request's SHA-256.
    pub digest: [u8; 8],
    /// The caller's transaction named `"datomic.tx"`.
    pub tx_named: bool,
    /// How the caller's tempids bind.
    pub mode: Mode,
    /// Whose id it is (`None`: written before owners were recorded, or
    /// while a member of the fleet could not read them).
    pub owner: Option<[u8; OWNER_LEN]>,
}

/// The first bytes of every key of `id`: what an index seek looks for.
#[must_use]
pub(crate) fn id_prefix(id: u128) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(3 + 16);
    prefix.extend_from_slice(MAGIC);
    prefix.extend_from_slice(&id.to_be_bytes());
    prefix
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let byte = u8::try_from(n & 0x7f).unwrap_or(0);
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

fn take<'a>(bytes: &'a [u8], at: &mut usize, len: usize) -> Option<&'a [u8]> {
    let slice = bytes.get(*at..at.checked_add(len)?)?;
    *at += len;
    Some(slice)
}

/// Encodes an identity value, or `None` for a kind a key does not carry
/// (keywords travel by an interner; sealed values; doubles).
fn encode_value(out: &mut Vec<u8>, value: &Value) -> Option<()> {
    match value {
        Value::Str(text) => {
            out.push(b's');
            varint(out, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
        Value::Long(n) => {
            out.push(b'l');
            out.extend_from_slice(&n.to_be_bytes());
        }
        Value::Instant(ms) => {
            out.push(b'i');
            out.extend_from_slice(&ms.to_be_bytes());
        }
        Value::Uuid(uuid) => {
            out.push(b'u');
            out.extend_from_slice(&uuid.to_be_bytes());
        }
        Value::Bool(flag) => out.extend_from_slice(&[b'b', u8::from(*flag)]),
        Value::Bytes(bytes) => {
            out.push(b'y');
            varint(out, bytes.len() as u64);
            out.extend_from_slice(bytes);
        }
        Value::Ref(entity) => {
            out.push(b'r');
            out.extend_from_slice(&entity.raw().to_be_bytes());
        }
        Value::Double(_) | Value::Keyword(_) | Value::Sealed(_) => return None,
    }
    Some(())
}

fn decode_value(bytes: &[u8], at: &mut usize) -> Option<Value> {
    let tag = *take(bytes, at, 1)?.first()?;
    let fixed = |at: &mut usize, len: usize| take(bytes, at, len).map(<[u8]>::to_vec);
    Some(match tag {
        b's' => {
            let len = usize::try_from(read_varint(bytes, at)?).ok()?;
            Value::Str(std::str::from_utf8(take(bytes, at, len)?).ok()?.into())
        }
        b'l' => Value::Long(i64::from_be_bytes(fixed(at, 8)?.try_into().ok()?)),
        b'i' => Value::Instant(i64::from_be_bytes(fixed(at, 8)?.try_into().ok()?)),
        b'u' => Value::Uuid(u128::from_be_bytes(fixed(at, 16)?.try_into().ok()?)),
        b'b' => Value::Bool(*take(bytes, at, 1)?.first()? != 0),
        b'y' => {
            let len = usize::try_from(read_varint(bytes, at)?).ok()?;
            Value::Bytes(take(bytes, at, len)?.into())
        }
        b'r' => Value::Ref(EntityId::from_raw(u64::from_be_bytes(
            fixed(at, 8)?.try_into().ok()?,
        ))),
        _ => return None,
    })
}

impl Key {
    /// The key's bytes, or `None` when an entity mode's identity value is a
    /// kind or size a key does not carry (record it with bindings instead).
    #[must_use]
    pub(crate) fn encode(&self) -> Option<Vec<u8>> {
        let mut out = id_prefix(self.id);
        out.extend_from_slice(&self.digest);
        let mode = match self.mode {
            Mode::None => 0,
            Mode::Entity { .. } => 1,
            Mode::Bindings => 2,
            Mode::Fenced => 3,
        };
        let owned = if self.owner.is_some() { OWNED } else { 0 };
        out.push((u8::from(self.tx_named) * TX_NAMED) | (mode << MODE_SHIFT) | owned);
        if let Mode::Entity { name, identity } = &self.mode {
            varint(&mut out, name.len() as u64);
            out.extend_from_slice(name.as_bytes());
            match identity {
                None => out.push(0),
                Some((attr, value)) => {
                    out.push(1);
                    out.extend_from_slice(&attr.raw().to_be_bytes());
                    let before = out.len();
                    encode_value(&mut out, value)?;
                    if out.len() - before > MAX_IDENTITY_BYTES {
                        return None;
                    }
                }
            }
        }
        if let Some(owner) = &self.owner {
            out.extend_from_slice(owner);
        }
        Some(out)
    }

    /// Decodes a key, or `None` for bytes that are not one.
    #[must_use]
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let mut at = 0;
        if take(bytes, &mut at, 3)? != MAGIC {
            return None;
        }
        let id = u128::from_be_bytes(take(bytes, &mut at, 16)?.try_into().ok()?);
        let digest: [u8; 8] = take(bytes, &mut at, 8)?.try_into().ok()?;
        let flags = *take(bytes, &mut at, 1)?.first()?;
        let mode = match (flags & MODE_MASK) >> MODE_SHIFT {
            0 => Mode::None,
            1 => {
                let len = usize::try_from(read_varint(bytes, &mut at)?).ok()?;
                let name = std::str::from_utf8(take(bytes, &mut at, len)?).ok()?.to_owned();
                let identity = if *take(bytes, &mut at, 1)?.first()? == 0 {
                    None
                } else {
                    let attr = u64::from_be_bytes(take(bytes, &mut at, 8)?.try_into().ok()?);
                    Some((EntityId::from_raw(attr), decode_value(bytes, &mut at)?))
                };
                Mode::Entity { name, identity }
            }
            2 => Mode::Bindings,
            _ => Mode::Fenced,
        };
        let owner = if flags & OWNED == 0 {
            None
        } else {
            Some(take(bytes, &mut at, OWNER_LEN)?.try_into().ok()?)
        };
        (at == bytes.len()).then_some(Self {
            id,
            digest,
            tx_named: flags & TX_NAMED != 0,
            mode,
            owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            // At most 8 characters of up to 4 bytes: within MAX_IDENTITY_BYTES.
            ".{0,8}".prop_map(|text: String| Value::Str(text.into())),
            any::<i64>().prop_map(Value::Long),
            any::<i64>().prop_map(Value::Instant),
            any::<u128>().prop_map(Value::Uuid),
            any::<bool>().prop_map(Value::Bool),
            proptest::collection::vec(any::<u8>(), 0..32).prop_map(|bytes| Value::Bytes(bytes.into())),
            any::<u64>().prop_map(|raw| Value::Ref(EntityId::from_raw(raw))),
        ]
    }

    fn mode() -> impl Strategy<Value = Mode> {
        prop_oneof![
            Just(Mode::None),
            Just(Mode::Bindings),
            Just(Mode::Fenced),
            (".{0,20}", proptest::option::of((any::<u64>(), value()))).prop_map(|(name, identity)| {
                Mode::Entity {
                    name,
                    identity: identity.map(|(attr, value)| (EntityId::from_raw(attr), value)),
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn keys_round_trip_and_share_their_ids_prefix(
            id in any::<u128>(),
            digest in any::<[u8; 8]>(),
            tx_named in any::<bool>(),
            mode in mode(),
            owner in proptest::option::of(any::<[u8; OWNER_LEN]>()),
        ) {
            let key = Key { id, digest, tx_named, mode, owner };
            let bytes = key.encode().expect("every generated value fits");
            prop_assert!(bytes.starts_with(&id_prefix(id)));
            prop_assert_eq!(Key::decode(&bytes), Some(key));
        }

        #[test]
        fn junk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Key::decode(&bytes);
        }
    }

    #[test]
    fn an_owner_follows_the_body_and_a_key_without_one_reads_as_before() {
        let key = |owner| Key {
            id: 9,
            digest: [1; 8],
            tx_named: false,
            mode: Mode::Entity {
                name: "order".into(),
                identity: None,
            },
            owner,
        };
        let legacy = key(None).encode().unwrap();
        let owned = key(Some([7; OWNER_LEN])).encode().unwrap();
        assert_eq!(owned.len(), legacy.len() + OWNER_LEN);
        assert!(owned.starts_with(&legacy[..PREFIX_LEN]));
        assert_eq!(Key::decode(&legacy).unwrap().owner, None);
        assert_eq!(Key::decode(&owned).unwrap().owner, Some([7; OWNER_LEN]));
        // A truncated owner is not a key.
        assert_eq!(Key::decode(&owned[..owned.len() - 1]), None);
    }

    #[test]
    fn large_or_keyword_identities_do_not_fit() {
        let key = |value: Value| Key {
            id: 1,
            digest: [0; 8],
            tx_named: false,
            mode: Mode::Entity {
                name: "x".into(),
                identity: Some((EntityId::from_raw(7), value)),
            },
            owner: None,
        };
        assert!(key(Value::Str("a".repeat(300).into())).encode().is_none());
        assert!(key(Value::Str("a".repeat(39).into())).encode().is_none());
        assert!(key(Value::Str("a".repeat(38).into())).encode().is_some());
        assert!(key(Value::Uuid(u128::MAX)).encode().is_some());
        assert!(key(Value::Keyword(0)).encode().is_none());
        assert!(key(Value::Str("short".into())).encode().is_some());
    }
}
