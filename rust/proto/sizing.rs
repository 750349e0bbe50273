// SPDX-License-Identifier: GPL-2.0

//! Sizing rules: how the module parameters turn into the limits a session
//! advertises, and the bounds each parameter must keep.

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

/// Bytes in a SCSI sector.
pub(crate) const SECTOR_SIZE: u32 = 512;
/// Bytes in a registration page.
pub(crate) const PAGE_4K: u32 = 4096;

/// `max_sectors` ib_iser uses by default: 512 KiB commands.
pub(crate) const DEF_MAX_SECTORS: u32 = 1024;
/// LUNs scanned per session by default.
pub(crate) const DEF_MAX_LUN: u32 = 512;
/// The least `max_sectors` a session uses: one 4 KiB page (the block layer
/// refuses a smaller command limit).
pub(crate) const MIN_MAX_SECTORS: u32 = 8;
/// The most `max_sectors` a session uses: 16 MiB (4096 pages, the largest
/// fast-registration list ib_iser supports).
pub(crate) const MAX_MAX_SECTORS: u32 = 32768;
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
    /// Largest command in sectors, as sessions use it: the value given,
    /// within `MIN_MAX_SECTORS..=MAX_MAX_SECTORS`.
    pub(crate) max_sectors: u32,
    /// The `max_sectors` value given (any above 0, as ib_iser takes).
    pub(crate) max_sectors_given: u32,
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

/// Each module parameter with its inclusive bounds, those of ib_iser:
/// - `max_sectors`: any above 0 (an unsigned int); sessions use it within
///   one 4 KiB page and 16 MiB ([`Params::max_sectors`]);
/// - `max_lun`: any above 0 (an unsigned int);
/// - `debug_level`: any int (above 2, riser's debug messages print);
/// - the booleans `always_register` and `pi_enable`: 0 or 1.
// CAST: u32 and i32 bounds, each within i64.
const BOUNDS: [(&str, i64, i64); 5] = [
    ("max_sectors", 1, u32::MAX as i64),
    ("max_lun", 1, u32::MAX as i64),
    ("debug_level", i32::MIN as i64, i32::MAX as i64),
    ("always_register", 0, 1),
    ("pi_enable", 0, 1),
];

/// Checks one module parameter's value against its bounds. An unknown name
/// is refused.
pub(crate) fn check_param(name: &str, value: i64) -> Result<(), ParamError> {
    let (name, min, max) = BOUNDS
        .iter()
        .copied()
        .find(|(n, _, _)| *n == name)
        .unwrap_or(("unknown parameter", 1, 0));
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ParamError {
            name,
            value,
            min,
            max,
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
        check_param("max_sectors", max_sectors.into())?;
        check_param("max_lun", max_lun.into())?;
        check_param("debug_level", debug_level.into())?;
        Ok(Self {
            max_sectors: max_sectors.clamp(MIN_MAX_SECTORS, MAX_MAX_SECTORS),
            max_sectors_given: max_sectors,
            max_lun,
            debug_level,
            always_register,
            pi_enable,
        })
    }

    /// Whether sessions use another `max_sectors` than the value given
    /// (outside `MIN_MAX_SECTORS..=MAX_MAX_SECTORS`): said at load.
    pub(crate) fn max_sectors_adjusted(&self) -> bool {
        self.max_sectors != self.max_sectors_given
    }

    /// Whether riser's debug messages print (ib_iser's `iser_dbg`: a
    /// `debug_level` above 2).
    pub(crate) fn debug(&self) -> bool {
        self.debug_level > 2
    }

    /// Scatter/gather entries of the largest command.
    pub(crate) fn sg_tablesize(&self) -> u16 {
        // The range of `max_sectors` bounds this to 4096.
        u16::try_from(sg_tablesize(self.max_sectors)).unwrap_or(u16::MAX)
    }
}

/// Management PDUs a connection may have in flight besides commands:
/// NOP-Out (2), Text, TMF (2) and Logout (ib_iser's ISER_MAX_TX_MISC_PDUS).
pub(crate) const TX_MISC_PDUS: u32 = 6;
/// Unsolicited PDUs a target may send besides responses: NOP-In (2) and
/// Async Messages (2) (ib_iser's ISER_MAX_RX_MISC_PDUS).
pub(crate) const RX_MISC_PDUS: u32 = 4;
/// Data-Out header buffers per command slot: a pool shared by the
/// connection's commands, from which a WRITE reserves all the unsolicited
/// Data-Outs it needs before it is posted.
pub(crate) const DATAOUT_SLOTS_PER_CMD: u32 = 3;
/// Send work requests one command has in flight at most besides its share of
/// the Data-Out pool: a LOCAL_INV chained before its registration (of the
/// slot's last local-only one), REG_MR, the command SEND, and the signaled
/// LOCAL_INV of its rkey when the response did not invalidate it.
pub(crate) const CMD_CHAIN_WRS: u32 = 4;
/// Send work requests the send queue holds per command slot: its chain and
/// its share of the Data-Out pool, each of which posts only on a header of
/// the pool (so the pool's Data-Outs never exceed it).
pub(crate) const SEND_WRS_PER_CMD: u32 = CMD_CHAIN_WRS + DATAOUT_SLOTS_PER_CMD;
/// Commands sent unsignaled in a row at most (see [`signal_interval`]).
pub(crate) const MAX_UNSIGNALED_RUN: u32 = 15;
/// Send work requests held for finished commands sent unsignaled, whose
/// slots a provider reclaims only when a later signaled request completes:
/// a run's chains.
pub(crate) const UNSIGNALED_WRS: u32 = MAX_UNSIGNALED_RUN * CMD_CHAIN_WRS;
/// Most scatter/gather pages one registration maps (16 MiB in 4 KiB pages).
pub(crate) const MAX_SG_PAGES: u32 = 4096;

/// Queue sizes and SCSI limits of one connection on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnSizing {
    /// Commands the connection can carry at once (SCSI host `can_queue`).
    pub(crate) max_cmds: u32,
    /// Send queue depth, including one slot for draining.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth, including one slot for draining.
    pub(crate) max_recv_wr: u32,
    /// One in this many command SENDs that went inline is signaled
    /// ([`signal_interval`]).
    pub(crate) signal_interval: u32,
    /// Completion queue entries for both queues.
    pub(crate) cq_entries: u32,
    /// Scatter/gather entries per command (SCSI host `sg_tablesize`).
    pub(crate) sg_tablesize: u32,
    /// Pages each fast-registration MR must map.
    pub(crate) pages_per_mr: u32,
    /// Largest command in sectors (SCSI host `max_sectors`).
    pub(crate) max_sectors: u32,
}

/// Sizes a connection for `cmds` commands on a device whose QPs hold at most
/// `max_qp_wr` work requests and whose MRs map at most `max_fr_pages` pages.
///
/// `sg_gaps` says the device registers lists with gaps between entries; when
/// it does not, a buffer whose first entry is not page aligned costs one page
/// more, which is reserved. Fails when the device cannot carry one command.
pub(crate) fn conn_sizing(
    params: &Params,
    cmds: u32,
    max_qp_wr: u32,
    max_fr_pages: u32,
    sg_gaps: bool,
) -> Option<ConnSizing> {
    let reserved = u32::from(!sg_gaps);
    // The commands' work requests, those of finished unsignaled commands,
    // and the management PDUs' (ib_iser reserves nine a command instead,
    // 4619 for 512 commands, which providers that round queues to a power
    // of two, rxe among them, hold in 8192 slots: these fit in 4096).
    let wanted_send = cmds
        .checked_mul(SEND_WRS_PER_CMD)?
        .checked_add(UNSIGNALED_WRS + TX_MISC_PDUS + RX_MISC_PDUS)?;
    // One send slot stays free for ib_drain_qp.
    let max_send_wr = wanted_send.checked_add(1)?.min(max_qp_wr);
    let max_cmds = max_send_wr
        .checked_sub(1 + TX_MISC_PDUS + RX_MISC_PDUS)?
        .checked_div(SEND_WRS_PER_CMD)?
        .min(cmds);
    if max_cmds == 0 {
        return None;
    }
    let max_recv_wr = max_cmds.checked_add(1)?.min(max_qp_wr);
    let sg_tablesize = sg_tablesize(params.max_sectors)
        .min(MAX_SG_PAGES)
        .min(max_fr_pages.checked_sub(reserved)?);
    if sg_tablesize == 0 {
        return None;
    }
    Some(ConnSizing {
        max_cmds,
        max_send_wr,
        max_recv_wr,
        signal_interval: signal_interval(max_send_wr, max_cmds),
        cq_entries: max_send_wr.checked_add(max_recv_wr)?,
        sg_tablesize,
        pages_per_mr: sg_tablesize + reserved,
        max_sectors: params
            .max_sectors
            .min(sg_tablesize.saturating_mul(PAGE_4K / SECTOR_SIZE)),
    })
}

/// How often a command SEND whose PDU went inline is signaled: one in the
/// returned number. The others complete without a completion entry, and a
/// provider reclaims their send queue slots only when a later signaled
/// request completes, so up to `interval - 1` finished commands may still
/// hold [`CMD_CHAIN_WRS`] slots each. A send queue of `max_send_wr` holds
/// `max_cmds` commands in flight ([`SEND_WRS_PER_CMD`] each), the
/// management PDUs and the drain's slot: what is left is the room those
/// finished commands may take. 1 (every SEND signaled) when there is none.
/// A power of two (the largest the room allows), so that the sender tells
/// the SEND to signal by a mask of its count.
pub(crate) fn signal_interval(max_send_wr: u32, max_cmds: u32) -> u32 {
    let spare = max_send_wr
        .saturating_sub(1 + TX_MISC_PDUS + RX_MISC_PDUS)
        .saturating_sub(max_cmds.saturating_mul(SEND_WRS_PER_CMD));
    let most = 1 + (spare / CMD_CHAIN_WRS).min(MAX_UNSIGNALED_RUN);
    1 << most.checked_ilog2().unwrap_or(0)
}

/// Full-feature receives a normal session posts: one for each of its
/// `tasks` (each may be answered) and each unsolicited PDU the target may
/// send ([`RX_MISC_PDUS`]), within the `max_recv_wr` receive queue less
/// the drain's slot; at least one.
pub(crate) fn ff_recvs(tasks: u32, max_recv_wr: u32) -> u32 {
    tasks
        .saturating_add(RX_MISC_PDUS)
        .min(max_recv_wr.saturating_sub(1))
        .max(1)
}

// In the kernel the tests are a KUnit suite; built as a host crate
// (tests/host) they run under `cargo test`.
#[cfg_attr(MODULE, kunit_tests(riser_proto_sizing))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    use super::super::TestRng as Rng;

    /// This module's draws from the shared test generator.
    trait ModRng {
        fn around(&mut self, lo: u32, hi: u32) -> u32;
    }

    impl ModRng for Rng {
        /// Mostly a value in `lo..=hi`, now and then any.
        fn around(&mut self, lo: u32, hi: u32) -> u32 {
            if self.u32() & 15 == 0 {
                self.u32()
            } else {
                lo + self.u32() % (hi - lo + 1)
            }
        }
    }

    /// Work requests one command needs: its sends, the management PDUs and
    /// the drain slot.
    const ONE_CMD_WRS: u32 = SEND_WRS_PER_CMD + TX_MISC_PDUS + RX_MISC_PDUS + 1;

    /// Random valid parameters and device limits, with at most as many
    /// commands as libiscsi asks for (a u16).
    fn random_device(r: &mut Rng) -> (Params, u32, u32, u32, bool) {
        let max_sectors = 8 + r.u32() % 32761;
        let p = Params {
            max_sectors,
            max_sectors_given: max_sectors,
            max_lun: 1,
            debug_level: 0,
            always_register: true,
            pi_enable: false,
        };
        let cmds = r.around(0, 1024) % 65536;
        // A quarter of the devices near the least that carries a command.
        let max_qp_wr = match r.u32() % 4 {
            0 => r.u32() % (2 * ONE_CMD_WRS),
            _ => r.around(0, 20000),
        };
        let max_fr_pages = match r.u32() % 4 {
            0 => r.u32() % 4,
            _ => r.around(0, 600),
        };
        (p, cmds, max_qp_wr, max_fr_pages, r.u32() & 1 == 0)
    }

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
    fn each_parameter_is_checked_by_name() {
        // What ib_iser takes: max_sectors and max_lun above 0, any
        // debug_level.
        assert_eq!(check_param("max_sectors", 1), Ok(()));
        assert_eq!(check_param("max_sectors", 0).map_err(|e| e.min), Err(1));
        assert_eq!(check_param("max_sectors", 65536), Ok(()));
        assert_eq!(check_param("max_lun", 65537), Ok(()));
        assert_eq!(
            check_param("max_lun", 1 << 32).map_err(|e| e.max),
            Err(0xffff_ffff)
        );
        assert_eq!(check_param("debug_level", 4), Ok(()));
        assert_eq!(check_param("debug_level", 9), Ok(()));
        assert_eq!(check_param("debug_level", -1), Ok(()));
        assert!(check_param("debug_level", 1 << 31).is_err());
        assert_eq!(check_param("always_register", 1), Ok(()));
        assert_eq!(
            check_param("pi_enable", 2).map_err(|e| e.name),
            Err("pi_enable")
        );
        assert_eq!(
            check_param("no_such_thing", 0).map_err(|e| e.name),
            Err("unknown parameter")
        );
        assert!(check_param("max_sectors", i64::MIN).is_err());
        assert!(check_param("max_sectors", i64::MAX).is_err());
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
                min: 1,
                max: 0xffff_ffff
            })
        );
        assert_eq!(
            Params::new(1024, 0, 0, true, false).map_err(|e| e.name),
            Err("max_lun")
        );
        assert!(Params::new(8, 1, 4, false, true).is_ok());
        assert!(Params::new(32768, 65536, 0, true, false).is_ok());
        assert!(Params::new(u32::MAX, u32::MAX, i32::MIN, true, false).is_ok());
    }

    #[test]
    fn sessions_use_max_sectors_within_a_page_and_16_mib() {
        let p = |n| Params::new(n, DEF_MAX_LUN, 0, true, false).ok();
        assert_eq!(
            p(1).map(|p| (p.max_sectors, p.max_sectors_adjusted())),
            Some((8, true))
        );
        assert_eq!(
            p(8).map(|p| (p.max_sectors, p.max_sectors_adjusted())),
            Some((8, false))
        );
        assert_eq!(
            p(32768).map(|p| (p.max_sectors, p.max_sectors_adjusted())),
            Some((32768, false))
        );
        assert_eq!(
            p(32769).map(|p| (p.max_sectors, p.max_sectors_given, p.sg_tablesize())),
            Some((32768, 32769, 4096))
        );
        // debug_level above 2 prints the debug messages, as ib_iser's.
        let d = |l| Params::new(1024, 1, l, true, false).is_ok_and(|p| p.debug());
        assert!(!d(2) && d(3) && d(9) && !d(-1));
    }

    fn defaults() -> Params {
        match Params::new(DEF_MAX_SECTORS, DEF_MAX_LUN, 0, true, false) {
            Ok(p) => p,
            Err(_) => Params {
                max_sectors: 0,
                max_sectors_given: 0,
                max_lun: 0,
                debug_level: 0,
                always_register: true,
                pi_enable: false,
            },
        }
    }

    #[test]
    fn a_large_device_gets_queues_for_512_commands() {
        // 512 commands: 512 * 7, 60 for an unsignaled run and 10 send WRs
        // plus one for draining: below 4096 (ib_iser's 4619 is not).
        let s = conn_sizing(&defaults(), 512, 16384, 512, false);
        assert_eq!(
            s,
            Some(ConnSizing {
                max_cmds: 512,
                max_send_wr: 3655,
                max_recv_wr: 513,
                signal_interval: 1 + MAX_UNSIGNALED_RUN,
                cq_entries: 4168,
                sg_tablesize: 128,
                pages_per_mr: 129,
                max_sectors: 1024,
            })
        );
    }

    #[test]
    fn a_small_queue_limits_commands_not_safety() {
        // rxe-like limits but a tiny QP: commands shrink to what fits.
        let s = conn_sizing(&defaults(), 512, 1000, 512, false);
        assert!(s.is_some());
        if let Some(s) = s {
            assert_eq!(s.max_send_wr, 1000);
            assert_eq!(s.max_cmds, (1000 - 11) / 7);
            // What is left holds no finished command: all signaled.
            assert_eq!(s.signal_interval, 1);
            assert!(s.max_cmds * SEND_WRS_PER_CMD + TX_MISC_PDUS + RX_MISC_PDUS < s.max_send_wr);
            assert!(s.max_recv_wr > s.max_cmds);
        }
        // A QP that cannot carry one command is refused.
        assert_eq!(conn_sizing(&defaults(), 512, 17, 512, false), None);
        assert!(conn_sizing(&defaults(), 512, 18, 512, false).is_some());
    }

    #[test]
    fn registration_limits_shrink_sg_and_sectors() {
        // A device mapping 65 pages per MR, without gap support: 64 pages
        // of data plus the reserved misalignment page, 256 KiB commands.
        let s = conn_sizing(&defaults(), 128, 16384, 65, false);
        assert_eq!(
            s.map(|s| (s.sg_tablesize, s.pages_per_mr, s.max_sectors)),
            Some((64, 65, 512))
        );
        // With gap support nothing is reserved.
        let s = conn_sizing(&defaults(), 128, 16384, 65, true);
        assert_eq!(s.map(|s| (s.sg_tablesize, s.pages_per_mr)), Some((65, 65)));
        // A device that maps no page is refused, not divided by.
        assert_eq!(conn_sizing(&defaults(), 128, 16384, 1, false), None);
        assert_eq!(conn_sizing(&defaults(), 128, 16384, 0, true), None);
    }

    #[test]
    fn random_devices_are_sized_within_their_limits() {
        let mut r = Rng(0xa54f_f53a_5f1d_36f1);
        let mut sized = 0;
        for _ in 0..2000 {
            let (p, cmds, max_qp_wr, max_fr_pages, gaps) = random_device(&mut r);
            let reserved = u32::from(!gaps);
            let sg_max = sg_tablesize(p.max_sectors).min(MAX_SG_PAGES);
            let carries_one =
                cmds > 0 && max_qp_wr >= ONE_CMD_WRS && max_fr_pages > reserved && sg_max > 0;
            let Some(s) = conn_sizing(&p, cmds, max_qp_wr, max_fr_pages, gaps) else {
                // Refused only when the device cannot carry one command.
                assert!(!carries_one);
                continue;
            };
            sized += 1;
            assert!(carries_one);
            // Commands: some, no more than asked, each with its sends, the
            // management PDUs and a free slot for draining.
            assert!(s.max_cmds >= 1 && s.max_cmds <= cmds);
            let sends = u64::from(s.max_cmds) * u64::from(SEND_WRS_PER_CMD)
                + u64::from(TX_MISC_PDUS + RX_MISC_PDUS);
            assert!(sends < u64::from(s.max_send_wr));
            // As many commands as the device's send queue holds.
            let one_more = sends + u64::from(SEND_WRS_PER_CMD) + 1;
            assert!(s.max_cmds == cmds || one_more > u64::from(max_qp_wr));
            // Queues within the device; a receive per command, plus one.
            assert!(s.max_send_wr <= max_qp_wr && s.max_recv_wr <= max_qp_wr);
            assert!(s.max_recv_wr > s.max_cmds);
            assert_eq!(
                u64::from(s.cq_entries),
                u64::from(s.max_send_wr) + u64::from(s.max_recv_wr)
            );
            // Registrations within the device; a command fits one.
            assert!(s.sg_tablesize >= 1 && s.sg_tablesize <= sg_max);
            assert_eq!(s.pages_per_mr, s.sg_tablesize + reserved);
            assert!(s.pages_per_mr <= max_fr_pages);
            assert!(s.max_sectors >= PAGE_4K / SECTOR_SIZE && s.max_sectors <= p.max_sectors);
            assert!(
                u64::from(s.max_sectors) * u64::from(SECTOR_SIZE)
                    <= u64::from(s.sg_tablesize) * u64::from(PAGE_4K)
            );
        }
        assert!(sized > 200 && sized < 1800);
    }

    #[test]
    fn a_larger_device_never_gets_less() {
        let mut r = Rng(0x510e_527f_ade6_82d1);
        for _ in 0..2000 {
            let (p, cmds, max_qp_wr, max_fr_pages, gaps) = random_device(&mut r);
            let Some(s) = conn_sizing(&p, cmds, max_qp_wr, max_fr_pages, gaps) else {
                continue;
            };
            let more_wr = max_qp_wr.saturating_add(1 + r.u32() % 4096);
            let t = conn_sizing(&p, cmds, more_wr, max_fr_pages, gaps);
            assert!(t.is_some());
            if let Some(t) = t {
                assert!(t.max_cmds >= s.max_cmds && t.max_send_wr >= s.max_send_wr);
                assert_eq!(t.sg_tablesize, s.sg_tablesize);
            }
            let more_pages = max_fr_pages.saturating_add(1 + r.u32() % 4096);
            let t = conn_sizing(&p, cmds, max_qp_wr, more_pages, gaps);
            assert!(t.is_some());
            if let Some(t) = t {
                assert!(t.sg_tablesize >= s.sg_tablesize && t.max_sectors >= s.max_sectors);
                assert_eq!(t.max_cmds, s.max_cmds);
            }
            // Asking for what was given gives as many commands.
            let t = conn_sizing(&p, s.max_cmds, max_qp_wr, max_fr_pages, gaps);
            assert_eq!(
                t.map(|t| (t.max_cmds, t.sg_tablesize)),
                Some((s.max_cmds, s.sg_tablesize))
            );
        }
    }

    #[test]
    fn unsignaled_commands_fit_the_spare_send_slots() {
        // No room: every SEND signaled.
        assert_eq!(signal_interval(0, 0), 1);
        assert_eq!(signal_interval(18, 1), 1);
        // A queue sized for its commands: a whole run, whatever their number.
        for cmds in [1, 60, 128, 512] {
            let s = conn_sizing(&defaults(), cmds, 16384, 512, false);
            assert_eq!(s.map(|s| s.signal_interval), Some(1 + MAX_UNSIGNALED_RUN));
        }
        let mut r = Rng(0x9b05_688c_2b3e_6c1f);
        for _ in 0..2000 {
            let cmds = r.around(0, 600);
            let wrs = r.around(0, 5000);
            let n = signal_interval(wrs, cmds);
            assert!((1..=1 + MAX_UNSIGNALED_RUN).contains(&n));
            assert!(n.is_power_of_two());
            // The commands in flight, the finished-but-unreclaimed ones,
            // the management PDUs and the drain's slot fit the queue, when
            // any run was allowed.
            let in_flight = u64::from(cmds) * u64::from(SEND_WRS_PER_CMD);
            let unreclaimed = u64::from(n - 1) * u64::from(CMD_CHAIN_WRS);
            let misc = u64::from(1 + TX_MISC_PDUS + RX_MISC_PDUS);
            assert!(n == 1 || in_flight + unreclaimed + misc <= u64::from(wrs));
            // And the largest power of two that room allows.
            let room = u64::from(wrs).saturating_sub(in_flight + misc) / u64::from(CMD_CHAIN_WRS);
            let most = 1 + room.min(u64::from(MAX_UNSIGNALED_RUN));
            assert!(u64::from(n) <= most && most < 2 * u64::from(n));
        }
    }

    /// A session posts a receive per task and per unsolicited PDU, never
    /// more than the queue holds less the drain's slot, never none.
    #[test]
    fn receives_follow_the_sessions_tasks() {
        // open-iscsi's default session: 128 tasks, on a queue for 512.
        assert_eq!(ff_recvs(128, 513), 132);
        assert_eq!(ff_recvs(512, 513), 512);
        assert_eq!(ff_recvs(u32::MAX, 513), 512);
        assert_eq!(ff_recvs(0, 0), 1);
        let mut r = Rng(0x3c6e_f372_fe94_f82b);
        for _ in 0..1000 {
            let (t, q) = (r.around(0, 4096), r.around(0, 4096));
            let n = ff_recvs(t, q);
            assert!(n >= 1);
            assert!(n <= q.saturating_sub(1).max(1));
            assert!(n >= t.saturating_add(RX_MISC_PDUS).min(q.saturating_sub(1)));
        }
    }

    #[test]
    fn parameters_are_checked_against_their_documented_bounds() {
        // The bounds as `check_param`'s documentation gives them.
        const DOCUMENTED: [(&str, i64, i64); 5] = [
            ("max_sectors", 1, 0xffff_ffff),
            ("max_lun", 1, 0xffff_ffff),
            ("debug_level", -0x8000_0000, 0x7fff_ffff),
            ("always_register", 0, 1),
            ("pi_enable", 0, 1),
        ];
        let mut r = Rng(0x9b05_688c_2b3e_6c1f);
        for _ in 0..2000 {
            for (name, min, max) in DOCUMENTED {
                // Near either bound, or anything.
                let near = i64::from(r.u32() % 7) - 3;
                let v = match r.u32() % 3 {
                    0 => min + near,
                    1 => max + near,
                    // CAST: a random i64, any bit pattern.
                    _ => r.u64() as i64,
                };
                let want = if (min..=max).contains(&v) {
                    Ok(())
                } else {
                    Err(ParamError {
                        name,
                        value: v,
                        min,
                        max,
                    })
                };
                assert_eq!(check_param(name, v), want);
            }
            let v = i64::from(r.u32());
            assert!(check_param("max_sector", v).is_err());
        }
    }
}
