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
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! The pure logic of the buffer organizer, with time as an argument (tested with a fake
//! clock). `score`: a blob's *heat* is its access count decayed exponentially (half-life
//! `organizer.frequency_window`), stored as of its last access (`Blob::heat`, `atime_ns`) so an
//! access costs one `exp2`; its score is `0.5 × recency + 0.5 × heat / (heat + 4)` with
//! recency `2^(-age / recency_window)`, or the user score when set (a blob read once just now
//! scores 0.6, three times 0.71, untouched for two recency windows < 0.3). A tier's score is
//! the time of a 1 MiB access (latency + size/bandwidth) on the fastest tier over that on this
//! one. `plan` turns tiers (score, capacity, used) and blobs (bytes, tier mask, score,
//! stationary, user score) into one round's moves: requested promotions first (prefetcher),
//! then *pressure* (a tier above `high_water` sheds its coldest blobs to the nearest slower
//! tier with room until `low_water`), then *promotion* of hot blobs (≥ `promote_threshold`,
//! hottest first) to the fastest faster tier that stays under `high_water` — when none has
//! room, colder blobs of the fastest tier are demoted (those < `demote_threshold`, and those
//! < `promote_threshold` that score at least `SWAP_MARGIN` = 0.2 below the hot blob, so a RAM
//! tier full of lukewarm blobs still yields to a hot one without ping-pong between similar
//! scores) and the promotion follows in a later round. Each hot blob gets room of its own
//! (room made for earlier ones is set aside), and victims are taken coldest first from one
//! sorted list with a cursor — the threshold only falls as the hot blobs get cooler — so a
//! round can make room for as many hot blobs as its move and byte budgets allow, in
//! O(n log n) for the whole plan. Space leaving a tier is not reused within a plan.
//! `TokenBucket` (bytes, refill rate, burst, debt) is the bandwidth limit.
//! **Architecture Invariant** (proptest): a plan never brings a tier above its capacity
//! (promotions: above `high_water`), never moves a stationary blob, moves a blob at most once,
//! has ≤ `moves_max` moves and ≤ `bytes_max` bytes (one larger move alone is allowed),
//! promotes to faster and demotes to slower tiers, never promotes a blob whose user score is
//! below `promote_threshold` nor demotes one whose user score is at least that.
//! **API Boundary:** no I/O, no clock, no daemon types.
#![forbid(unsafe_code)]

mod bucket;
mod plan;
pub mod score;

pub use bucket::TokenBucket;
pub use plan::{plan, BlobState, Move, MoveKind, PlanLimits, TierState, SWAP_MARGIN};
pub use score::{blob_score, heat_after_access, heat_now, tier_scores, ScoreParams};
