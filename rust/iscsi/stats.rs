// SPDX-License-Identifier: GPL-2.0

//! A transport's own counters, which `iscsiadm -m session -s` shows after
//! libiscsi's (the custom part of `struct iscsi_stats`).

use crate::bindings;
use core::{
    marker::PhantomData,
    ptr::NonNull, //
};
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;

/// The most custom counters one `iscsi_stats` holds.
pub(crate) const MAX: u32 = bindings::ISCSI_STATS_CUSTOM_MAX;

/// Bytes of a counter's name, its NUL included.
const DESC_MAX: usize = kernel::num::casts::u32_as_usize(bindings::ISCSI_STATS_CUSTOM_DESC_MAX);

/// Where a transport writes its counters during `get_stats`.
///
/// # Invariants
///
/// `stats` is the `iscsi_stats` scsi_transport_iscsi allocated for the
/// reply, with room for [`MAX`] custom entries after it, exclusively ours
/// for `'a`; its `custom_length` entries are written, the rest free.
pub(crate) struct CustomStats<'a> {
    stats: NonNull<bindings::iscsi_stats>,
    _p: PhantomData<&'a mut bindings::iscsi_stats>,
}

impl CustomStats<'_> {
    /// # Safety
    ///
    /// `stats` must satisfy the type invariant for `'a`, with
    /// `custom_length` at most [`MAX`].
    pub(super) unsafe fn from_raw(stats: NonNull<bindings::iscsi_stats>) -> Self {
        Self {
            stats,
            _p: PhantomData,
        }
    }

    /// How many counters are written.
    pub(crate) fn len(&self) -> u32 {
        // SAFETY: The stats are ours (type invariant); read through a raw
        // pointer.
        unsafe { (&raw const (*self.stats.as_ptr()).custom_length).read() }
    }

    /// Adds the counter `name` (cut to 63 bytes) with `value`. False, and
    /// nothing written, once [`MAX`] counters are.
    pub(crate) fn push(&mut self, name: &CStr, value: u64) -> bool {
        let n = self.len();
        if n >= MAX {
            return false;
        }
        let name = name.to_bytes();
        let len = name.len().min(DESC_MAX - 1);
        let mut entry = bindings::iscsi_stats_custom {
            desc: [0; DESC_MAX],
            value,
        };
        for (d, s) in entry.desc.iter_mut().zip(&name[..len]) {
            // CAST: a byte of the name, as the C `char` it is.
            *d = *s as c_char;
        }
        let s = self.stats.as_ptr();
        // SAFETY: `n` is below `MAX`, so entry `n` is inside the room the
        // reply has after the stats (type invariant); the stats are ours.
        // The entries are reached through raw pointers only: no reference
        // to the reply (or its flexible array) is formed.
        unsafe {
            (&raw mut (*s).custom)
                .cast::<bindings::iscsi_stats_custom>()
                .add(usize::from_safe_cast(n))
                .write(entry);
            (&raw mut (*s).custom_length).write(n + 1);
        }
        true
    }
}

#[kunit_tests(riser_iscsi_stats)]
mod tests {
    use super::*;
    use kernel::alloc::KVec;

    #[test]
    fn counters_fill_the_reply_and_no_more() -> Result {
        let custom = size_of::<bindings::iscsi_stats_custom>();
        // CAST: u32 to usize, lossless (here and below).
        let bytes = size_of::<bindings::iscsi_stats>() + custom * (MAX as usize + 1);
        // u64s: the reply's alignment; one entry more than the room, to
        // see that nothing is written there.
        let mut buf = KVec::from_elem(0u64, bytes.div_ceil(8), GFP_KERNEL)?;
        let stats = NonNull::new(buf.as_mut_ptr().cast::<bindings::iscsi_stats>()).ok_or(EINVAL)?;
        let long = c"a_name_longer_than_sixty_three_bytes_is_cut_to_exactly_sixty_three_bytes";
        {
            // SAFETY: `buf` has room for the stats and `MAX` entries (and
            // one more), zeroed, and is used only through `out` in this
            // block.
            let mut out = unsafe { CustomStats::from_raw(stats) };
            assert!(out.push(long, 7));
            for i in 1..MAX {
                assert!(out.push(c"n", u64::from(i)));
            }
            assert_eq!(out.len(), MAX);
            assert!(!out.push(c"over", 99));
            assert_eq!(out.len(), MAX);
        }
        // SAFETY: `out` is gone; `buf` holds the stats and `MAX + 1`
        // entries after them.
        let entries = unsafe {
            core::slice::from_raw_parts((*stats.as_ptr()).custom.as_ptr(), MAX as usize + 1)
        };
        assert_eq!(entries[0].value, 7);
        assert_eq!(entries[0].desc[62] as u8, long.to_bytes()[62]);
        assert_eq!(entries[0].desc[63], 0);
        assert_eq!(entries[1].desc[0] as u8, b'n');
        assert_eq!(entries[1].desc[1], 0);
        assert_eq!(entries[MAX as usize - 1].value, u64::from(MAX - 1));
        // Past the room: untouched.
        assert_eq!(entries[MAX as usize].value, 0);
        assert_eq!(entries[MAX as usize].desc[0], 0);
        Ok(())
    }
}
