//! Byte layout of the shared-memory segments (control segment and
//! per-client segments). Offsets only: the segments themselves are mapped
//! by `strata-shm`; both sides compute the same `ClientLayout` from the
//! numbers in the hello answer and then check the segment header.

use std::sync::atomic::{AtomicU32, AtomicU64};
use strata_shm::{Doorbell, Ring};

pub const CTL_MAGIC: u64 = 0x5354_5241_5441_4354; // "STRATACT"
pub const CLIENT_MAGIC: u64 = 0x5354_5241_5441_434c; // "STRATACL"

/// Daemon states published in the control segment.
pub const DAEMON_RUNNING: u32 = 1;
pub const DAEMON_STOPPING: u32 = 2;

/// Head of the control segment, mapped by every client.
#[repr(C, align(64))]
pub struct CtlHeader {
    pub magic: u64,
    pub version: u32,
    pub state: AtomicU32,
    pub daemon_pid: u32,
    pub _pad: u32,
    /// Bumped when a file leaves the buffer because a process maps its
    /// destination file shared and writable (`WireFileAttr::direct`):
    /// clients then move their descriptors of such files to the destination.
    pub direct_gen: AtomicU64,
    /// The engine's count of events that may answer a waiting fsync
    /// (`FileState::sync_events`), published before `sync_bell` rings.
    pub sync_events: AtomicU64,
    pub _pad2: [u32; 6],
    /// Rung by clients after pushing a request; the daemon sleeps on it.
    pub daemon_bell: Doorbell,
    /// Rung by the daemon when `sync_events` moved: fsync waiters sleep on
    /// it between their `FileSyncState` questions instead of polling.
    pub sync_bell: Doorbell,
}

pub const CTL_SEGMENT_BYTES: usize = 4096;

/// Maximum channels per client (bitmap of claimed channels has this many bits).
pub const CHANNELS_MAX: usize = 1024;

#[repr(C, align(64))]
pub struct ClientHeader {
    pub magic: u64,
    pub version: u32,
    pub channels: u32,
    pub depth: u32,
    pub arg_bytes: u32,
    pub client_id: u64,
    pub _pad: [u64; 4],
    /// Bit i set: channel i is claimed by some thread of the client. The
    /// daemon polls claimed channels only (a hint: it validates everything).
    pub claimed: [AtomicU64; CHANNELS_MAX / 64],
}

/// Per-channel head: the doorbell the client sleeps on for completions.
#[repr(C, align(64))]
pub struct ChannelHeader {
    pub cq_bell: Doorbell,
}

/// One request slot's fixed part.
#[repr(C, align(64))]
pub struct SlotRecords {
    pub req: crate::record::RequestRecord,
    pub resp: crate::record::ResponseRecord,
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// Offsets within a client segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLayout {
    pub channels: u32,
    pub depth: u32,
    pub arg_bytes: u32,
    pub header_bytes: usize,
    pub channel_stride: usize,
    pub sq_off: usize,
    pub cq_off: usize,
    pub slots_off: usize,
    pub args_off: usize,
    pub total_bytes: usize,
}

impl ClientLayout {
    pub fn new(channels: u32, depth: u32, arg_bytes: u32) -> ClientLayout {
        assert!(channels as usize <= CHANNELS_MAX && channels > 0);
        assert!(depth.is_power_of_two() && depth >= 2);
        assert!(arg_bytes.is_multiple_of(4096) && arg_bytes > 0);
        let header_bytes = round_up(std::mem::size_of::<ClientHeader>(), 4096);
        let ring_bytes = round_up(Ring::bytes_for(depth), 64);
        let sq_off = round_up(std::mem::size_of::<ChannelHeader>(), 64);
        let cq_off = sq_off + ring_bytes;
        let slots_off = cq_off + ring_bytes;
        let slots_bytes = depth as usize * std::mem::size_of::<SlotRecords>();
        let args_off = round_up(slots_off + slots_bytes, 4096);
        let channel_stride = args_off + depth as usize * arg_bytes as usize;
        let total_bytes = header_bytes + channels as usize * channel_stride;
        ClientLayout {
            channels,
            depth,
            arg_bytes,
            header_bytes,
            channel_stride,
            sq_off,
            cq_off,
            slots_off,
            args_off,
            total_bytes,
        }
    }

    pub fn channel_off(&self, ch: u32) -> usize {
        debug_assert!(ch < self.channels);
        self.header_bytes + ch as usize * self.channel_stride
    }

    pub fn slot_off(&self, ch: u32, slot: u32) -> usize {
        debug_assert!(slot < self.depth);
        self.channel_off(ch) + self.slots_off + slot as usize * std::mem::size_of::<SlotRecords>()
    }

    pub fn arg_off(&self, ch: u32, slot: u32) -> usize {
        debug_assert!(slot < self.depth);
        self.channel_off(ch) + self.args_off + slot as usize * self.arg_bytes as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = ClientLayout::new(64, 64, 8192);
        assert_eq!(l.channel_stride % 4096, 0);
        assert!(l.sq_off + Ring::bytes_for(64) <= l.cq_off);
        assert!(l.cq_off + Ring::bytes_for(64) <= l.slots_off);
        assert!(
            l.slot_off(0, 63) + std::mem::size_of::<SlotRecords>() <= l.channel_off(0) + l.args_off
        );
        assert_eq!(l.arg_off(1, 0), l.channel_off(1) + l.args_off);
        assert_eq!(l.total_bytes, l.header_bytes + 64 * l.channel_stride);
        assert!(std::mem::size_of::<CtlHeader>() <= CTL_SEGMENT_BYTES);
        assert_eq!(std::mem::offset_of!(CtlHeader, direct_gen) % 8, 0);
        assert_eq!(std::mem::offset_of!(CtlHeader, daemon_bell), 64);
        assert_eq!(std::mem::offset_of!(CtlHeader, sync_events) % 8, 0);
        assert_eq!(std::mem::offset_of!(CtlHeader, sync_bell), 128);
    }
}
