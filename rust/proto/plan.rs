// SPDX-License-Identifier: GPL-2.0

//! How a SCSI command goes out: which key describes its data, what the
//! target is told (the iSER header's STag) and may do with it, whether the
//! command PDU is sent inline, and how many unsolicited Data-Outs follow.
//!
//! The decisions ib_iser spreads over iser_initiator.c and iser_memory.c,
//! made here from plain numbers so they are tested and fuzzed on their own;
//! the send path follows the plan.

#![forbid(unsafe_code)]

/// The direction of a command's data. (In the order of the DMA API's
/// directions, as the iscsi layer's `Direction` is: the driver's
/// conversion from one to the other is then no instruction at all.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataDir {
    /// Both ways.
    Bidi,
    /// The initiator sends data (WRITE).
    Write,
    /// The target sends data (READ).
    Read,
    /// No data.
    None,
}

/// What the plan is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Command {
    /// The data's direction.
    pub(crate) dir: DataDir,
    /// Bytes of data.
    pub(crate) len: u32,
    /// Bytes sent as immediate data in the command PDU.
    pub(crate) imm: u32,
    /// Bytes sent in unsolicited Data-Out PDUs after it.
    pub(crate) unsol: u32,
    /// Most data bytes per Data-Out PDU (MaxXmitDataSegmentLength).
    pub(crate) max_xmit: u32,
    /// DMA segments of the data's mapping.
    pub(crate) segments: u32,
    /// Whether the PD offers a global rkey (`always_register=0`).
    pub(crate) global_rkey: bool,
    /// Bytes the QP sends inline.
    pub(crate) max_inline: u32,
    /// Bytes of the iSER header and BHS.
    pub(crate) headers: u32,
}

/// The key that describes the command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// No data.
    None,
    /// The PD's local DMA lkey: one segment that only this side's SENDs
    /// read (all the data goes as immediate data), no STag at all.
    LocalDma,
    /// The PD's global rkey: one segment, no registration.
    GlobalRkey,
    /// A fast-registration MR of the command.
    Mr,
}

/// What the target may do with the data's memory, and so the access an MR
/// is registered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exposure {
    /// Nothing: the target gets no STag.
    Local,
    /// RDMA READ (a WRITE's solicited data).
    RemoteRead,
    /// RDMA WRITE (a READ's data).
    RemoteWrite,
}

/// The STag the iSER header carries, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advert {
    /// None: no data, or all of a WRITE's data goes by SEND.
    None,
    /// The read STag, at the start of the buffer.
    Read,
    /// The write STag, `offset` bytes into the buffer: what the target
    /// reads follows the immediate and unsolicited data.
    Write {
        /// Bytes into the buffer.
        offset: u32,
    },
}

/// How the command goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The key of its data.
    pub(crate) key: Key,
    /// The STag the target is given.
    pub(crate) advert: Advert,
    /// What the target may do with the memory.
    pub(crate) exposure: Exposure,
    /// Whether the command PDU carries immediate data (sent from the
    /// command's buffer, after the headers).
    pub(crate) with_imm: bool,
    /// Whether the command PDU goes inline (copied by the provider while
    /// posting): only one without immediate data, on a QP that takes it.
    pub(crate) inline: bool,
    /// Unsolicited Data-Out PDUs to send after the command.
    pub(crate) dataouts: u32,
}

impl Plan {
    /// A READ through an MR, its command PDU inline: the common read.
    pub(crate) const MR_READ_INLINE: Plan = Plan {
        key: Key::Mr,
        advert: Advert::Read,
        exposure: Exposure::RemoteWrite,
        with_imm: false,
        inline: true,
        dataouts: 0,
    };

    /// A WRITE whose data all goes as immediate data from one segment:
    /// the common small write.
    pub(crate) const IMMEDIATE_WRITE: Plan = Plan {
        key: Key::LocalDma,
        advert: Advert::None,
        exposure: Exposure::Local,
        with_imm: true,
        inline: false,
        dataouts: 0,
    };

    /// A WRITE with immediate data whose rest, from `offset` on, the
    /// target reads through an MR, no Data-Out: the common large write.
    pub(crate) const fn mr_write(offset: u32) -> Plan {
        Plan {
            key: Key::Mr,
            advert: Advert::Write { offset },
            exposure: Exposure::RemoteRead,
            with_imm: true,
            inline: false,
            dataouts: 0,
        }
    }

    /// Whether the target is given a key it can use until it is
    /// invalidated: an MR with remote access.
    pub(crate) fn remote_mr(&self) -> bool {
        self.key == Key::Mr && self.exposure != Exposure::Local
    }
}

/// A command's plan, the common shapes named: each a constant (or one
/// number) that the send path folds into its copy of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// [`Plan::MR_READ_INLINE`].
    MrReadInline,
    /// [`Plan::IMMEDIATE_WRITE`].
    ImmediateWrite,
    /// [`Plan::mr_write`] from `offset`.
    MrWrite {
        /// Bytes into the buffer: the immediate data's.
        offset: u32,
    },
    /// Any other plan, never one of the above.
    Other(Plan),
}

impl Shape {
    /// The plan.
    pub(crate) fn plan(&self) -> Plan {
        match *self {
            Shape::MrReadInline => Plan::MR_READ_INLINE,
            Shape::ImmediateWrite => Plan::IMMEDIATE_WRITE,
            Shape::MrWrite { offset } => Plan::mr_write(offset),
            Shape::Other(p) => p,
        }
    }
}

/// The plan for `c` ([`plan`]'s), the common shapes told by the few
/// comparisons that decide them, ahead of the general rules. Exactly
/// [`plan`]'s result: the tests and the `plan` fuzz target check it, and
/// that `Other` is never a named shape.
#[inline(always)]
pub(crate) fn shape(c: &Command) -> Result<Shape, PlanError> {
    // One segment with a global rkey goes unregistered: no MR.
    let mr = !(c.segments == 1 && c.global_rkey);
    match c.dir {
        DataDir::Read if c.len > 0 && mr && c.max_inline >= c.headers => {
            return Ok(Shape::MrReadInline);
        }
        // Immediate data and no Data-Out: all of it, from one segment, or
        // a part, the rest read by the target through an MR.
        DataDir::Write if c.len > 0 && c.imm > 0 && c.unsol == 0 => {
            if c.imm >= c.len {
                if c.segments == 1 {
                    return Ok(Shape::ImmediateWrite);
                }
            } else if mr {
                return Ok(Shape::MrWrite { offset: c.imm });
            }
        }
        _ => {}
    }
    plan(c).map(Shape::Other)
}

/// Why a command cannot be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// Bidirectional commands: iSER initiators do not support them.
    Bidi,
    /// A READ or WRITE of no data.
    NoData,
    /// Unsolicited data with no Data-Out size to split it by.
    NoMaxXmit,
}

/// How many Data-Out PDUs carry `unsol` bytes of unsolicited data, at most
/// `max_xmit` each.
pub(crate) fn dataouts(unsol: u32, max_xmit: u32) -> Result<u32, PlanError> {
    match (unsol, max_xmit) {
        (0, _) => Ok(0),
        (_, 0) => Err(PlanError::NoMaxXmit),
        _ => Ok(unsol.div_ceil(max_xmit)),
    }
}

/// The plan for `c`.
#[inline]
pub(crate) fn plan(c: &Command) -> Result<Plan, PlanError> {
    let (advert, all_imm) = match c.dir {
        DataDir::Bidi => return Err(PlanError::Bidi),
        DataDir::None => (Advert::None, false),
        DataDir::Read | DataDir::Write if c.len == 0 => return Err(PlanError::NoData),
        DataDir::Read => (Advert::Read, false),
        DataDir::Write => {
            // Immediate data plus unsolicited Data-Outs: the target
            // RDMA-READs only what follows them.
            let sent = c.imm.saturating_add(c.unsol).min(c.len);
            let advert = if sent < c.len {
                Advert::Write { offset: sent }
            } else {
                Advert::None
            };
            (advert, c.imm >= c.len)
        }
    };
    let exposure = match advert {
        Advert::None => Exposure::Local,
        Advert::Read => Exposure::RemoteWrite,
        Advert::Write { .. } => Exposure::RemoteRead,
    };
    let single = c.segments == 1;
    let key = if c.dir == DataDir::None {
        Key::None
    } else if all_imm && single {
        // Sent by this side alone: the target gets no STag, so one
        // segment needs no registration (as ib_iser does).
        Key::LocalDma
    } else if single && c.global_rkey {
        Key::GlobalRkey
    } else {
        Key::Mr
    };
    let with_imm = c.dir == DataDir::Write && c.imm > 0;
    let inline = !with_imm && c.max_inline >= c.headers;
    let dataouts = if c.dir == DataDir::Write {
        dataouts(c.unsol, c.max_xmit)?
    } else {
        0
    };
    Ok(Plan {
        key,
        advert,
        exposure,
        with_imm,
        inline,
        dataouts,
    })
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

#[cfg_attr(MODULE, kunit_tests(riser_proto_plan))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    const HEADERS: u32 = 76;

    fn cmd(dir: DataDir, len: u32) -> Command {
        Command {
            dir,
            len,
            imm: 0,
            unsol: 0,
            max_xmit: 8192,
            segments: 4,
            global_rkey: false,
            max_inline: 0,
            headers: HEADERS,
        }
    }

    #[test]
    fn the_named_shapes_are_the_plans_of_their_commands() {
        let mut read = cmd(DataDir::Read, 4096);
        read.max_inline = HEADERS;
        assert_eq!(plan(&read), Ok(Plan::MR_READ_INLINE));
        let mut small = cmd(DataDir::Write, 4096);
        (small.imm, small.segments) = (4096, 1);
        assert_eq!(plan(&small), Ok(Plan::IMMEDIATE_WRITE));
        let mut large = cmd(DataDir::Write, 524288);
        large.imm = 8192;
        assert_eq!(plan(&large), Ok(Plan::mr_write(8192)));
    }

    #[test]
    fn the_named_shapes_are_found_ahead_of_the_general_plan() {
        let mut read = cmd(DataDir::Read, 4096);
        read.max_inline = HEADERS;
        assert_eq!(shape(&read), Ok(Shape::MrReadInline));
        // One segment with a global rkey: unregistered, not an MR read.
        (read.segments, read.global_rkey) = (1, true);
        assert!(matches!(shape(&read), Ok(Shape::Other(_))));
        let mut small = cmd(DataDir::Write, 4096);
        (small.imm, small.segments) = (4096, 1);
        assert_eq!(shape(&small), Ok(Shape::ImmediateWrite));
        // With a Data-Out after it, no longer the common write.
        small.unsol = 512;
        assert!(matches!(shape(&small), Ok(Shape::Other(_))));
        let mut large = cmd(DataDir::Write, 524288);
        large.imm = 8192;
        assert_eq!(shape(&large), Ok(Shape::MrWrite { offset: 8192 }));
        assert_eq!(shape(&cmd(DataDir::Read, 0)), Err(PlanError::NoData));
    }

    #[test]
    fn a_read_gives_the_target_a_write_key_to_the_whole_buffer() {
        let p = plan(&cmd(DataDir::Read, 65536)).unwrap();
        assert_eq!(p.key, Key::Mr);
        assert_eq!(p.advert, Advert::Read);
        assert_eq!(p.exposure, Exposure::RemoteWrite);
        assert!(p.remote_mr());
        assert_eq!((p.with_imm, p.inline, p.dataouts), (false, false, 0));
    }

    #[test]
    fn a_write_advertises_only_what_the_target_must_read() {
        let mut c = cmd(DataDir::Write, 65536);
        c.imm = 8192;
        c.unsol = 16384;
        c.max_xmit = 8192;
        let p = plan(&c).unwrap();
        assert_eq!(p.advert, Advert::Write { offset: 24576 });
        assert_eq!(p.exposure, Exposure::RemoteRead);
        assert_eq!(p.key, Key::Mr);
        assert!(p.with_imm && !p.inline);
        assert_eq!(p.dataouts, 2);
        // A last Data-Out carries the remainder.
        c.unsol = 16385;
        assert_eq!(plan(&c).unwrap().dataouts, 3);
    }

    #[test]
    fn a_write_sent_whole_by_send_gives_no_key() {
        let mut c = cmd(DataDir::Write, 4096);
        c.imm = 4096;
        // Several segments: an MR, registered for local access only.
        let p = plan(&c).unwrap();
        assert_eq!(
            (p.key, p.advert, p.exposure),
            (Key::Mr, Advert::None, Exposure::Local)
        );
        assert!(!p.remote_mr());
        // One segment: the local DMA lkey, even with a global rkey.
        c.segments = 1;
        c.global_rkey = true;
        let p = plan(&c).unwrap();
        assert_eq!((p.key, p.advert), (Key::LocalDma, Advert::None));
        // Immediate and unsolicited data that cover it: no STag either;
        // one segment then goes with the global rkey's registration-free
        // description (never advertised).
        c.imm = 1024;
        c.unsol = 3072;
        let p = plan(&c).unwrap();
        assert_eq!((p.advert, p.exposure), (Advert::None, Exposure::Local));
        assert_eq!(p.key, Key::GlobalRkey);
        assert_eq!(p.dataouts, 1);
    }

    #[test]
    fn one_segment_uses_the_global_rkey_only_when_there_is_one() {
        let mut c = cmd(DataDir::Read, 4096);
        c.segments = 1;
        assert_eq!(plan(&c).unwrap().key, Key::Mr);
        c.global_rkey = true;
        let p = plan(&c).unwrap();
        assert_eq!(p.key, Key::GlobalRkey);
        assert!(!p.remote_mr());
    }

    #[test]
    fn only_a_pdu_without_immediate_data_goes_inline() {
        let mut c = cmd(DataDir::None, 0);
        c.max_inline = HEADERS;
        let p = plan(&c).unwrap();
        assert_eq!((p.key, p.advert, p.inline), (Key::None, Advert::None, true));
        c.max_inline = HEADERS - 1;
        assert!(!plan(&c).unwrap().inline);
        let mut w = cmd(DataDir::Write, 4096);
        w.max_inline = 256;
        assert!(plan(&w).unwrap().inline);
        w.imm = 512;
        assert!(!plan(&w).unwrap().inline);
    }

    #[test]
    fn commands_that_cannot_go_are_refused() {
        assert_eq!(plan(&cmd(DataDir::Bidi, 4096)), Err(PlanError::Bidi));
        assert_eq!(plan(&cmd(DataDir::Read, 0)), Err(PlanError::NoData));
        assert_eq!(plan(&cmd(DataDir::Write, 0)), Err(PlanError::NoData));
        let mut c = cmd(DataDir::Write, 4096);
        c.unsol = 4096;
        c.max_xmit = 0;
        assert_eq!(plan(&c), Err(PlanError::NoMaxXmit));
        // Without unsolicited data the Data-Out size does not matter.
        c.unsol = 0;
        assert!(plan(&c).is_ok());
    }

    #[test]
    fn random_commands_keep_the_plan_consistent() {
        let mut rng = super::super::TestRng(0x5eed_c0de_1234_5678);
        for _ in 0..4096 {
            let len = rng.u32() % 0x10_0000;
            let c = Command {
                dir: [DataDir::None, DataDir::Read, DataDir::Write][rng.below(3)],
                len,
                // A quarter all immediate data, to the byte.
                imm: if rng.below(4) == 0 {
                    len
                } else {
                    rng.u32() % 0x2_0000
                },
                // Half without Data-Outs: the common shapes have none.
                unsol: if rng.below(2) == 0 {
                    0
                } else {
                    rng.u32() % 0x4_0000
                },
                max_xmit: rng.u32() % 0x4_0000,
                segments: rng.u32() % 4,
                global_rkey: rng.u32() % 2 == 0,
                max_inline: rng.u32() % 512,
                headers: HEADERS,
            };
            if let Ok(p) = plan(&c) {
                check(&c, &p);
            }
            check_shape(&c);
        }
    }
}

/// [`shape`] agrees with [`plan`] on `c`, and names every plan that has
/// a name (for the tests and the `plan` fuzz target).
#[cfg(any(MODULE, test, fuzzing))]
pub(crate) fn check_shape(c: &Command) {
    let s = shape(c);
    assert_eq!(s.map(|s| s.plan()), plan(c));
    if let Ok(Shape::Other(p)) = s {
        assert!(p != Plan::MR_READ_INLINE && p != Plan::IMMEDIATE_WRITE);
        if let Advert::Write { offset } = p.advert {
            assert!(p != Plan::mr_write(offset));
        }
    }
}

/// The properties every plan has (for the tests and the `plan` fuzz
/// target):
/// a STag only where the target must reach the memory and inside the
/// buffer; an exposure that matches it; no local-only key for memory the
/// target is told of; inline only without immediate data; enough Data-Outs
/// for the unsolicited data.
#[cfg(any(MODULE, test, fuzzing))]
pub(crate) fn check(c: &Command, p: &Plan) {
    match p.advert {
        Advert::None => assert_eq!(p.exposure, Exposure::Local),
        Advert::Read => {
            assert_eq!(c.dir, DataDir::Read);
            assert_eq!(p.exposure, Exposure::RemoteWrite);
        }
        Advert::Write { offset } => {
            assert_eq!(c.dir, DataDir::Write);
            assert_eq!(p.exposure, Exposure::RemoteRead);
            assert!(offset < c.len);
            assert_eq!(
                u64::from(offset),
                (u64::from(c.imm) + u64::from(c.unsol)).min(u64::from(c.len))
            );
        }
    }
    if c.dir == DataDir::None {
        assert_eq!((p.key, p.advert, p.dataouts), (Key::None, Advert::None, 0));
    } else {
        assert!(p.key != Key::None);
    }
    if p.key == Key::LocalDma {
        assert_eq!(p.advert, Advert::None);
        assert!(c.imm >= c.len && c.segments == 1);
    }
    if p.key == Key::GlobalRkey {
        assert!(c.global_rkey && c.segments == 1);
    }
    assert!(!(p.inline && p.with_imm));
    assert_eq!(p.with_imm, c.dir == DataDir::Write && c.imm > 0);
    if c.dir == DataDir::Write && c.unsol > 0 {
        assert!(u64::from(p.dataouts) * u64::from(c.max_xmit) >= u64::from(c.unsol));
        assert!(u64::from(p.dataouts - 1) * u64::from(c.max_xmit) < u64::from(c.unsol));
    } else {
        assert_eq!(p.dataouts, 0);
    }
}
