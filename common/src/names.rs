//! Corium's database-name rule, checked by both tiers on every request
//! before anything touches storage.
//!
//! A database name is 1–128 ASCII letters, digits, `-` or `_` (corium
//! 0.1.90, `TransactorNode`'s create and fork check). A saga step addresses
//! the saga's branch, `<parent>.saga.<32 hex digits>` (corium-db
//! `saga::parse_branch_name`), whose parent is itself a database (or a
//! branch) name. Anything else can name no database: it is refused
//! `INVALID_ARGUMENT`, never looked up, never routed.

/// The longest database name Corium accepts.
pub const MAX_NAME_BYTES: usize = 128;

/// Why a name can name no database.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
#[error(
    "invalid database name {0:?}: use 1-128 letters, digits, '-' or '_' (or a saga branch of such a database)"
)]
pub struct InvalidName(pub String);

/// Whether `name` is a database name (not a branch).
#[must_use]
pub fn is_database(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// Whether `name` names a database or a saga branch of one.
#[must_use]
pub fn is_addressable(name: &str) -> bool {
    // Each branch level adds ".saga." and 32 hex digits, so the depth is
    // bounded by the name's length.
    let mut current = name;
    loop {
        if is_database(current) {
            return true;
        }
        match corium_db::saga::parse_branch_name(current) {
            Some((parent, _)) => current = parent,
            None => return false,
        }
    }
}

/// The database `name` is hosted with: `name` itself, or for a saga branch
/// (`<parent>.saga.<id>`, at any depth) the database at its root. Corium
/// hosts a branch in its parent's process and fences its steps with the
/// parent's lease (corium-transactor `branch.rs`), so every call naming a
/// branch is routed, owned and served as a call on this database.
#[must_use]
pub fn home(name: &str) -> &str {
    // A database name has no '.': no branch to walk up (every call asks).
    if is_database(name) {
        return name;
    }
    let mut current = name;
    while let Some((parent, _)) = corium_db::saga::parse_branch_name(current) {
        current = parent;
    }
    current
}

/// `name`, if it names a database or a saga branch of one.
///
/// # Errors
/// [`InvalidName`] otherwise.
pub fn check(name: &str) -> Result<(), InvalidName> {
    if is_addressable(name) {
        Ok(())
    } else {
        Err(InvalidName(name.chars().take(MAX_NAME_BYTES + 16).collect()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_saga_branch_is_at_home_in_its_root_database() {
        let branch = corium_db::saga::branch_name("orders", 0xfeed);
        assert_eq!(home("orders"), "orders");
        assert_eq!(home(&branch), "orders");
        assert_eq!(home(&corium_db::saga::branch_name(&branch, 7)), "orders");
        assert_eq!(home("orders.saga.zz"), "orders.saga.zz", "not a branch");
    }

    #[test]
    fn databases_and_their_saga_branches_are_addressable() {
        assert!(is_addressable("orders"));
        assert!(is_addressable("a-b_C9"));
        assert!(is_addressable(&"x".repeat(128)));
        let branch = corium_db::saga::branch_name("orders", 0xfeed);
        assert!(is_addressable(&branch), "{branch}");
        assert!(is_addressable(&corium_db::saga::branch_name(&branch, 7)));
        assert!(!is_database(&branch), "a branch is not a database name");
    }

    #[test]
    fn junk_is_refused() {
        for junk in [
            "",
            " ",
            "a b",
            "a/b",
            "../x",
            "ü",
            "a.b",
            "orders.saga.zz",
            "meta:x",
            &"x".repeat(129),
        ] {
            assert!(check(junk).is_err(), "{junk:?}");
        }
        let bad_parent = corium_db::saga::branch_name("bad name", 1);
        assert!(check(&bad_parent).is_err());
    }

    #[test]
    fn the_message_is_bounded() {
        let error = check(&"é".repeat(10_000)).unwrap_err();
        assert!(error.to_string().len() < 600, "{}", error.to_string().len());
    }

    proptest! {
        #[test]
        fn names_of_the_allowed_alphabet_are_databases(name in "[A-Za-z0-9_-]{1,128}") {
            prop_assert!(is_database(&name));
            prop_assert!(check(&name).is_ok());
        }
    }
}
