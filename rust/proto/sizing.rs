// SPDX-License-Identifier: GPL-2.0

//! Sizing rules: how the module parameters turn into the limits a session
//! advertises, and the bounds each parameter must keep.

use core::ops::RangeInclusive;
use kernel::prelude::kunit_tests;

/// Bytes in a SCSI sector.
pub(crate) const SECTOR_SIZE: u32 = 512;
/// Bytes in a registration page.
pub(crate) const PAGE_4K: u32 = 4096;

/// `max_sectors` ib_iser uses by default: 512 KiB commands.
pub(crate) const DEF_MAX_SECTORS: u32 = 1024;
/// Allowed `max_sectors`: at least one 4 KiB page, at most 16 MiB (4096
/// pages, the largest fast-registration list ib_iser supports).
pub(crate) const MAX_SECTORS_RANGE: RangeInclusive<u32> = 8..=32768;
/// LUNs scanned per session by default.
pub(crate) const DEF_MAX_LUN: u32 = 512;
/// Allowed `max_lun`.
pub(crate) const MAX_LUN_RANGE: RangeInclusive<u32> = 1..=65536;
/// Allowed `debug_level`: 0 (off) to 4 (every PDU).
pub(crate) const DEBUG_LEVEL_RANGE: RangeInclusive<i32> = 0..=4;
/// Commands queued per LUN by default: as many as a session holds by default
/// (ib_iser's ISER_DEF_XMIT_CMDS_MAX).
pub(crate) const DEF_CMD_PER_LUN: i16 = 512;

/// Scatter/gather entries a command of `max_sectors` sectors needs when each
/// entry maps one 4 KiB page.
pub(crate) const fn sg_tablesize(max_sectors: u32) -> u32 {
    max_sectors.saturating_mul(SECTOR_SIZE) / PAGE_4K
}

/// The module parameters after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// Largest command in sectors.
    pub(crate) max_sectors: u32,
    /// LUNs per session.
    pub(crate) max_lun: u32,
    /// Debug verbosity.
    pub(crate) debug_level: i32,
    /// Register memory even for single-entry buffers.
    pub(crate) always_register: bool,
    /// T10-PI offload requested.
    pub(crate) pi_enable: bool,
}

/// A module parameter out of its range: its name, the value and the bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamError {
    /// The parameter's name.
    pub(crate) name: &'static str,
    /// The refused value.
    pub(crate) value: i64,
    /// Smallest allowed value.
    pub(crate) min: i64,
    /// Largest allowed value.
    pub(crate) max: i64,
}

fn check<T: Copy + PartialOrd + Into<i64>>(
    name: &'static str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<T, ParamError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ParamError {
            name,
            value: value.into(),
            min: (*range.start()).into(),
            max: (*range.end()).into(),
        })
    }
}

impl Params {
    /// Validates raw parameter values.
    pub(crate) fn new(
        max_sectors: u32,
        max_lun: u32,
        debug_level: i32,
        always_register: bool,
        pi_enable: bool,
    ) -> Result<Self, ParamError> {
        Ok(Self {
            max_sectors: check("max_sectors", max_sectors, MAX_SECTORS_RANGE)?,
            max_lun: check("max_lun", max_lun, MAX_LUN_RANGE)?,
            debug_level: check("debug_level", debug_level, DEBUG_LEVEL_RANGE)?,
            always_register,
            pi_enable,
        })
    }

    /// Scatter/gather entries of the largest command.
    pub(crate) fn sg_tablesize(&self) -> u16 {
        // The range of `max_sectors` bounds this to 4096.
        u16::try_from(sg_tablesize(self.max_sectors)).unwrap_or(u16::MAX)
    }
}

#[kunit_tests(riser_proto_sizing)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ib_isers() {
        let p = Params::new(DEF_MAX_SECTORS, DEF_MAX_LUN, 0, true, false);
        assert!(p.is_ok());
        if let Ok(p) = p {
            assert_eq!(p.sg_tablesize(), 128);
            assert_eq!(p.max_sectors, 1024);
        }
    }

    #[test]
    fn sg_tablesize_follows_max_sectors() {
        assert_eq!(sg_tablesize(8), 1);
        assert_eq!(sg_tablesize(15), 1);
        assert_eq!(sg_tablesize(1024), 128);
        assert_eq!(sg_tablesize(32768), 4096);
        assert_eq!(sg_tablesize(u32::MAX), u32::MAX / PAGE_4K);
    }

    #[test]
    fn out_of_range_values_are_refused_with_their_bounds() {
        assert_eq!(
            Params::new(0, 512, 0, true, false),
            Err(ParamError {
                name: "max_sectors",
                value: 0,
                min: 8,
                max: 32768
            })
        );
        assert_eq!(
            Params::new(32769, 512, 0, true, false).map_err(|e| e.name),
            Err("max_sectors")
        );
        assert_eq!(
            Params::new(1024, 0, 0, true, false).map_err(|e| e.name),
            Err("max_lun")
        );
        assert_eq!(
            Params::new(1024, 512, -1, true, false).map_err(|e| e.name),
            Err("debug_level")
        );
        assert_eq!(
            Params::new(1024, 512, 5, true, false).map_err(|e| e.value),
            Err(5)
        );
        assert!(Params::new(8, 1, 4, false, true).is_ok());
        assert!(Params::new(32768, 65536, 0, true, false).is_ok());
    }
}
