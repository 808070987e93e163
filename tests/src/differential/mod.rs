//! Differential runs: one scripted client drives the same sequence of
//! `corium.v1` calls against a stock Corium transactor (and stock peer
//! servers following it, for `PeerServer`) and against the fleet's address,
//! and the answers are compared field by field.
//!
//! Each answer is rendered to one line of text after the normalisations in
//! [`answer`], which remove only what cannot be equal between two servers
//! (clocks, the lease holder's name, storage locations) or what the fleet
//! adds on purpose (its request-id attributes); every other difference is a
//! finding. The list, with the reason for each, is
//! `docs/design/0016-differential-tests.md`.
//!
//! Layout: [`op`] — the calls a sequence is made of; [`fixed`] — the
//! sequence with every RPC; [`generate`] — seeded sequences and shrinking;
//! [`answer`] — rendering an answer, entity ids renamed by first
//! appearance; [`play`](mod@play) — running a sequence against one side (where its
//! `PeerServer` calls go, at which basis) and comparing two transcripts.

pub mod answer;
pub mod fixed;
pub mod generate;
pub mod op;
pub mod play;

pub use op::Op;
pub use play::{Difference, Side, Transcript, differences, play, play_with};
