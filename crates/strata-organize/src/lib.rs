//! # strata-organize
//!
//! The pure logic of the buffer organizer: **scores** and **decisions**.
//! No I/O, no clock: every function takes the time (`now_ns`) as an
//! argument, so everything here is unit-tested with a fake clock.
//!
//! * [`score`]: a blob's score from access frequency (an exponentially
//!   decayed access count, the *heat*) and recency over configurable
//!   windows, or the user's score; a tier's score from its bandwidth and
//!   latency.
//! * [`plan()`]: given tiers (score, capacity, usage) and blobs (size,
//!   tiers, score, user wishes), a bounded list of moves: promotions of hot
//!   blobs to faster tiers, demotions of cold ones when a tier crosses its
//!   high-water mark.
//! * [`TokenBucket`]: the organizer's bandwidth limit.
//!
//! **Invariants of a plan** (property-tested): a move never brings a tier
//! above its capacity (promotions: above its high-water mark); a stationary
//! blob never moves; a blob moves at most once per plan; at most
//! `moves_max` moves and `bytes_max` bytes (a single larger move is allowed
//! so that big blobs are not starved); promotions go to a faster tier,
//! demotions to a slower one; a blob with a user score is promoted only if
//! that score is at least `promote_threshold`, and never demoted while it is.
#![forbid(unsafe_code)]

mod bucket;
mod plan;
pub mod score;

pub use bucket::TokenBucket;
pub use plan::{plan, BlobState, Move, MoveKind, PlanLimits, TierState, SWAP_MARGIN};
pub use score::{blob_score, heat_after_access, heat_now, tier_scores, ScoreParams};
