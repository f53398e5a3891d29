//! Admin command sequences through the real engine: commands go into the admin submission
//! ring in guest RAM, the engine (`qpip_device::engine::Engine`, driven synchronously) fetches
//! and executes them against its object tables, and completions come back through the
//! completion ring with the phase protocol.
//!
//! Commands are built from the input with the structure the device expects (known opcodes,
//! handles of objects created earlier, page lists that exist, queue depths that are powers of
//! two, doorbell pages no live context uses) plus noise in any byte, and raw 64-byte
//! commands; interleaved with engine runs, resets, a completion ring left full, and (marking
//! the run "hostile") out-of-line ring indices. Checked:
//!
//! * nothing panics;
//! * the device writes guest RAM only in the admin completion ring, the query buffers
//!   commands named and the doorbell pages of live contexts (never the page of a
//!   `CREATE_CTX` that failed);
//! * every completion answers a command that was submitted and not yet completed, echoes its
//!   opcode, has a known status, zero results on error, CANCELLED only for waiting commands;
//! * `CREATE_CTX` succeeds exactly when its doorbell page is aligned, in RAM and no live
//!   context's (else BAD_ADDRESS; NO_RESOURCES once every context is in use), and a new
//!   context's page reads zero (the device clears what the driver left there);
//! * a command naming an object of another context never succeeds (ownership);
//! * at the end every synchronous command has completed, and once all contexts are destroyed
//!   nothing is left waiting.
#![no_main]

use std::collections::{BTreeMap, HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use qpip_abi::admin::*;
use qpip_abi::doorbell::{DB_CQ_SLOTS, DB_QP_SLOTS};
use qpip_abi::pci::DOORBELL_PAGES;
use qpip_device::engine::Control;
use qpip_fuzz::*;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

/// Guest RAM: larger than the default, to hold a doorbell page for every context the
/// device can have besides the admin rings and page lists.
const RAM: u64 = 512 << 10;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Cq,
    Qp,
    Mr,
    Listener,
}

/// What the harness knows about the device's objects (from successful completions).
#[derive(Default)]
struct Model {
    ctxs: Vec<u32>,
    /// Doorbell page of each live context (ordered: choices made from it must not depend on
    /// hashing).
    ctx_pages: BTreeMap<u32, u64>,
    ids: Vec<u32>,
    lkeys: Vec<u32>,
    owner: HashMap<(Kind, u32), u32>,
    /// Guest buffers that QUERY commands named: the device may write there.
    query_bufs: HashSet<u64>,
}

struct Fixture {
    /// Page lists: 1, 2, 4 and 8 good pages; an unaligned entry; an entry outside RAM.
    lists: [u64; 6],
    /// [`DOORBELL_PAGES`] pages set aside as doorbell pages: one for every context the
    /// device can have.
    db_pool: u64,
    /// First guest-physical address past RAM.
    ram_end: u64,
}

impl Fixture {
    /// Whether `len` bytes at `gpa` lie wholly in guest RAM.
    fn in_ram(&self, gpa: u64, len: u64) -> bool {
        gpa >= RAM_BASE && gpa.checked_add(len).is_some_and(|end| end <= self.ram_end)
    }

    fn in_pool(&self, page: u64) -> bool {
        page & (PAGE - 1) == 0
            && page >= self.db_pool
            && page < self.db_pool + DOORBELL_PAGES as u64 * PAGE
    }
}

fn fixture(d: &mut SyncDevice) -> Fixture {
    let pool = d.alloc_pages(15);
    let p = |i: u64| pool + i * PAGE;
    let l1 = d.page_list(&[p(0)]);
    let l2 = d.page_list(&[p(1), p(2)]);
    let l4 = d.page_list(&[p(3), p(4), p(5), p(6)]);
    let l8 = d.page_list(&(7..15).map(p).collect::<Vec<_>>());
    let bad = d.page_list(&[p(0) + 8]);
    let out = d.page_list(&[RAM_BASE + d.ram_size()]);
    let db_pool = d.alloc_pages(DOORBELL_PAGES as u64);
    // No command has named any of these pages yet, so the device may write none of them:
    // sealed (read-only to the engine, and not compared after every run) until a command
    // names one as a doorbell page or a query buffer (`Harness::submit`). Most inputs name
    // a few of these 85 pages, and comparing all of them after every run was most of the
    // checks' time.
    let end = db_pool + DOORBELL_PAGES as u64 * PAGE;
    d.seal(pool, end - pool);
    Fixture {
        lists: [l1, l2, l4, l8, bad, out],
        db_pool,
        ram_end: RAM_BASE + d.ram_size(),
    }
}

/// A guest address: one of the page lists, the query page, the end of RAM, outside RAM, or
/// anything at all.
fn addr(input: &mut Input, fx: &Fixture) -> u64 {
    match input.choose(10) {
        i @ 0..=5 => fx.lists[i],
        6 => QUERY_BUF + (input.u8() as u64 % 64) * 8,
        7 => fx.ram_end - (input.u8() as u64 % 64) * 8,
        8 => [0, u64::MAX - 7, RAM_BASE - 8][input.choose(3)],
        _ => input.u64(),
    }
}

/// A doorbell page for CREATE_CTX: mostly a page of the pool that is not `claimed` (so later
/// commands reach live contexts); else a live context's page, an unaligned address, an
/// address outside RAM or across its end, any page of RAM (the admin rings among them), or
/// anything.
fn doorbell_page(input: &mut Input, m: &Model, fx: &Fixture, claimed: &Claimed) -> u64 {
    let pool = |i: u64| fx.db_pool + (i % DOORBELL_PAGES as u64) * PAGE;
    match input.choose(12) {
        0..=6 => {
            let claimed = claimed();
            let free: Vec<u64> = (0..DOORBELL_PAGES as u64)
                .map(pool)
                .filter(|p| !claimed.contains(p))
                .collect();
            let k = input.u8() as usize;
            if free.is_empty() {
                pool(k as u64)
            } else {
                free[k % free.len()]
            }
        }
        7 => {
            let k = input.u8() as usize;
            match m.ctx_pages.values().nth(k % m.ctx_pages.len().max(1)) {
                Some(&p) => p,
                None => pool(k as u64),
            }
        }
        8 => pool(input.u8() as u64) + 1 + input.u16() as u64 % (PAGE - 1),
        9 => [
            0,
            RAM_BASE - PAGE,
            fx.ram_end,
            fx.ram_end - PAGE / 2,
            !(PAGE - 1),
            1 << 63,
        ][input.choose(6)],
        10 => RAM_BASE + (input.u8() as u64 % ((fx.ram_end - RAM_BASE) / PAGE)) * PAGE,
        _ => input.u64(),
    }
}

fn pick(input: &mut Input, v: &[u32]) -> u32 {
    if v.is_empty() {
        input.u8() as u32
    } else {
        v[v.len() - 1 - input.u8() as usize % v.len()]
    }
}

fn handle(input: &mut Input, m: &Model) -> u32 {
    match input.choose(6) {
        0 | 1 => pick(input, &m.ids),
        2 => pick(input, &m.lkeys),
        3 => pick(input, &m.ctxs),
        4 => input.u8() as u32,
        _ => input.u32(),
    }
}

fn ctx(input: &mut Input, m: &Model) -> u32 {
    match input.choose(4) {
        0 | 1 => pick(input, &m.ctxs),
        2 => input.u8() as u32 % (DOORBELL_PAGES + 2),
        _ => input.u32(),
    }
}

fn ip(input: &mut Input) -> [u8; 16] {
    let mut a = [0u8; 16];
    match input.choose(6) {
        0 => a[15] = 1,                                         // ::1
        1 => {}                                                 // ::
        2 => a[..4].copy_from_slice(&[0xfd, 0x51, 0x50, 0x50]), // fd51:5050::x
        3 => a[..2].copy_from_slice(&[0xff, 0x02]),             // multicast
        4 => a[..2].copy_from_slice(&[0xfe, 0x80]),             // link-local prefix
        _ => return input.array(),
    }
    a[15] |= input.u8() & 3;
    a
}

fn port(input: &mut Input) -> u16 {
    match input.choose(4) {
        0 => 0,
        1 => 7,
        2 => 49152 + input.u8() as u16,
        _ => input.u16(),
    }
}

fn depth(input: &mut Input) -> u32 {
    match input.choose(4) {
        0..=2 => 1 << (input.u8() % 17),
        _ => input.u32(),
    }
}

/// A command's argument body (without a heap allocation per command).
fn body_of<T: IntoBytes + Immutable>(a: &T) -> [u8; 48] {
    a.as_bytes().try_into().expect("a 48-byte argument body")
}

/// The doorbell pages of live contexts and of CREATE_CTX commands not yet completed, worked
/// out only for the commands that need them.
type Claimed<'a> = dyn Fn() -> HashSet<u64> + 'a;

/// A command with the structure its opcode expects, then maybe one byte of noise. `claimed`:
/// see [`Claimed`].
fn structured(input: &mut Input, m: &Model, fx: &Fixture, claimed: &Claimed) -> AdminCmd {
    let i = input.choose(ADMIN_OPCODES.len() + 1);
    let opcode = if i < ADMIN_OPCODES.len() {
        ADMIN_OPCODES[i]
    } else {
        input.u16()
    };
    let mut c = cmd0(opcode, ctx(input, m), 0);
    let body: [u8; 48] = match opcode {
        ADMIN_OP_CREATE_CTX => {
            let mut a = CreateCtxArgs::new_zeroed();
            a.doorbell_page = doorbell_page(input, m, fx, claimed);
            body_of(&a)
        }
        ADMIN_OP_QUERY_DEVICE | ADMIN_OP_QUERY_STATS => {
            let mut a = QueryArgs::new_zeroed();
            a.buf = addr(input, fx);
            a.len = input.one_of(&[128, 512, 4096, 0]);
            body_of(&a)
        }
        ADMIN_OP_SET_MAC => {
            let mut a = SetMacArgs::new_zeroed();
            a.mac = input.array();
            body_of(&a)
        }
        ADMIN_OP_ADD_ADDR | ADMIN_OP_DEL_ADDR => {
            let mut a = AddrArgs::new_zeroed();
            a.addr = ip(input);
            a.prefix_len = input.u8();
            body_of(&a)
        }
        ADMIN_OP_CREATE_CQ => {
            let mut a = CreateCqArgs::new_zeroed();
            a.page_list = addr(input, fx);
            a.depth = depth(input);
            a.npages = input.one_of(&[1, 2, 4, 8]);
            a.vector = input.u8() as u32 % 18;
            body_of(&a)
        }
        ADMIN_OP_CREATE_QP => {
            let mut a = CreateQpArgs::new_zeroed();
            a.sq_page_list = addr(input, fx);
            a.rq_page_list = addr(input, fx);
            a.send_cq = handle(input, m);
            a.recv_cq = if input.bool() {
                a.send_cq
            } else {
                handle(input, m)
            };
            a.sq_depth = depth(input);
            a.rq_depth = depth(input);
            a.sq_npages = 1 << (input.u8() % 5);
            a.rq_npages = 1 << (input.u8() % 5);
            a.qp_type = input.u8() % 4;
            a.framing = input.u8() % 4;
            body_of(&a)
        }
        ADMIN_OP_REG_MR => {
            let mut a = RegMrArgs::new_zeroed();
            a.page_list = addr(input, fx);
            a.first_page_offset = input.one_of(&[0, 8, 0x800, 0xfff]);
            a.iova = 0x7f00_0000_0000 + (input.u8() as u64) * PAGE + a.first_page_offset as u64;
            a.npages = input.one_of(&[1, 2, 4, 8]);
            a.length = match input.choose(4) {
                0 => (a.npages as u64 * PAGE).wrapping_sub(a.first_page_offset as u64),
                1 => input.u16() as u64,
                2 => 0,
                _ => input.u64(),
            };
            a.access = input.u8() as u32 % 9;
            if input.u8() & 7 == 0 {
                a.iova = input.u64();
            }
            body_of(&a)
        }
        ADMIN_OP_BIND => {
            let mut a = BindArgs::new_zeroed();
            a.addr = ip(input);
            a.port = port(input);
            // Sharing a UDP port (a second QP on it), now and then unknown flags.
            a.flags = match input.choose(4) {
                0 | 1 => 0,
                2 => BIND_FLAG_SHARE_PORT,
                _ => input.u16(),
            };
            body_of(&a)
        }
        ADMIN_OP_SET_QP_OPT => {
            let mut a = SetQpOptArgs::new_zeroed();
            a.option = input.one_of(&[QP_OPT_UDP_PEER, QP_OPT_KEEPALIVE, 0, 3]);
            if input.u8() & 1 == 0 {
                a.peer_addr = ip(input);
                a.peer_port = port(input);
            } else {
                a.keepalive_idle = input.u8() as u32;
                a.keepalive_interval = input.u8() as u32;
                a.keepalive_probes = input.u8() as u32;
            }
            body_of(&a)
        }
        ADMIN_OP_LISTEN => {
            let mut a = ListenArgs::new_zeroed();
            a.addr = ip(input);
            a.port = port(input);
            a.backlog = input.one_of(&[1, 16, 1024, 0, 1025]);
            body_of(&a)
        }
        ADMIN_OP_ACCEPT => {
            let mut a = AcceptArgs::new_zeroed();
            a.qp = handle(input, m);
            body_of(&a)
        }
        ADMIN_OP_CONNECT => {
            let mut a = ConnectArgs::new_zeroed();
            a.addr = ip(input);
            a.port = port(input);
            body_of(&a)
        }
        _ => [0; 48],
    };
    c.body.copy_from_slice(&body);
    if !matches!(
        opcode,
        ADMIN_OP_CREATE_CTX | ADMIN_OP_QUERY_DEVICE | ADMIN_OP_QUERY_STATS
    ) {
        c.handle = handle(input, m);
    }
    // Noise: one byte anywhere in the body, or the reserved flags.
    match input.choose(8) {
        0 => {
            let at = input.u8() as usize % 48;
            c.body[at] = input.u8();
        }
        1 => c.flags = input.u16(),
        _ => {}
    }
    c
}

/// Which object kind a command's `handle` names, if any.
fn handle_kind(opcode: u16) -> Option<Kind> {
    match opcode {
        ADMIN_OP_DESTROY_CQ => Some(Kind::Cq),
        ADMIN_OP_DESTROY_QP | ADMIN_OP_BIND | ADMIN_OP_CONNECT | ADMIN_OP_CLOSE
        | ADMIN_OP_SET_QP_OPT => Some(Kind::Qp),
        ADMIN_OP_DEREG_MR => Some(Kind::Mr),
        ADMIN_OP_DESTROY_LISTENER | ADMIN_OP_ACCEPT => Some(Kind::Listener),
        _ => None,
    }
}

struct Harness {
    d: SyncDevice,
    m: Model,
    fx: Fixture,
    /// Submissions since completions were last taken.
    since_take: u32,
    /// What the device may write besides the doorbell pages `SyncDevice` knows: the admin
    /// completion ring and every query buffer named so far.
    writable: Writable,
}

impl Harness {
    /// Doorbell pages that are live contexts' or that CREATE_CTX commands in flight name.
    fn claimed_pages(&self) -> HashSet<u64> {
        let pending = self.d.outstanding.values().filter_map(create_ctx_page);
        self.m.ctx_pages.values().copied().chain(pending).collect()
    }

    fn submit(&mut self, c: AdminCmd) {
        // A correct driver never has more commands in the ring than it has room for.
        if self.since_take >= ADMIN_DEPTH / 2 {
            self.settle();
        }
        if matches!(c.opcode, ADMIN_OP_QUERY_DEVICE | ADMIN_OP_QUERY_STATS) {
            let buf = u64::from_le_bytes(c.body[..8].try_into().unwrap());
            let len = std::mem::size_of::<Stats>() as u64;
            if self.m.query_bufs.insert(buf) {
                self.writable.add(buf, len);
            }
            self.unseal(buf, len);
            // A query told to write over the admin rings overwrites commands and completions:
            // the driver's doing, after which the bookkeeping cannot hold.
            if buf < ADMIN_CQ + PAGE && buf.saturating_add(len) > ADMIN_SQ {
                self.d.hostile = true;
            }
        }
        if let Some(page) = create_ctx_page(&c) {
            self.unseal(page, PAGE);
            // A doorbell page over the admin rings: the device zeroes commands and completions
            // in flight when it takes the page, as the driver asked.
            if page == ADMIN_SQ || page == ADMIN_CQ {
                self.d.hostile = true;
            }
            // A pool page no context uses or is about to use: leave junk in it, as a driver
            // reusing a page might, so the device's clearing shows.
            if self.fx.in_pool(page) && !self.claimed_pages().contains(&page) {
                self.d.write(page, &[0xa5; PAGE as usize]);
            }
        }
        if c.opcode == ADMIN_OP_CREATE_CQ {
            self.cq_ring_writable(&c);
        }
        self.d.submit(c);
        self.since_take += 1;
    }

    /// A CQ's ring is memory the device writes (its CQEs: an errored QP's flushes too, and
    /// a QP errs when its doorbell slot holds junk, which a query into a doorbell page
    /// leaves): the pages a CREATE_CQ's list names become writable, read as the device will
    /// read them. Over the admin rings, the bookkeeping cannot hold.
    fn cq_ring_writable(&mut self, c: &AdminCmd) {
        let a = CreateCqArgs::read_from_prefix(&c.body[..]).unwrap().0;
        let len = u64::from(a.npages.min(1024)) * 8;
        if a.page_list % 8 != 0 || !self.fx.in_ram(a.page_list, len) {
            return;
        }
        let list = self.d.read(a.page_list, len as usize);
        for entry in list.chunks(8) {
            let page = u64::from_le_bytes(entry.try_into().unwrap());
            if page & (PAGE - 1) == 0 && self.fx.in_ram(page, PAGE) {
                self.writable.add(page, PAGE);
                self.unseal(page, PAGE);
                if page == ADMIN_SQ || page == ADMIN_CQ {
                    self.d.hostile = true;
                }
            }
        }
    }

    /// Checks a CREATE_CTX outcome against the contexts live before it ran.
    fn check_create_ctx(&self, cmd: &AdminCmd, c: &AdminCqe) {
        let a = CreateCtxArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
        let page = a.doorbell_page;
        let expected: &[u16] = if cmd.flags != 0 || a.reserved != [0; 36] {
            &[ADMIN_STATUS_BAD_OPCODE]
        } else if a.flags & !CTX_FLAG_KERNEL != 0 {
            &[ADMIN_STATUS_BAD_PARAM]
        } else {
            let good = page & (PAGE - 1) == 0
                && self.fx.in_ram(page, PAGE)
                && !self.m.ctx_pages.values().any(|&p| p == page);
            match (self.m.ctx_pages.len() >= DOORBELL_PAGES as usize, good) {
                (true, true) => &[ADMIN_STATUS_NO_RESOURCES],
                (true, false) => &[ADMIN_STATUS_NO_RESOURCES, ADMIN_STATUS_BAD_ADDRESS],
                (false, true) => &[ADMIN_STATUS_OK],
                (false, false) => &[ADMIN_STATUS_BAD_ADDRESS],
            }
        };
        assert!(
            expected.contains(&c.status),
            "CREATE_CTX with doorbell page {page:#x} ({} contexts live: {:x?}): status {}, \
             expected one of {expected:?}: {c:?}",
            self.m.ctx_pages.len(),
            self.m.ctx_pages,
            c.status
        );
        let len = std::mem::size_of::<Stats>() as u64;
        let queried = self
            .m
            .query_bufs
            .iter()
            .any(|&b| b < page.saturating_add(PAGE) && b.saturating_add(len) > page);
        if c.status == ADMIN_STATUS_OK && self.fx.in_pool(page) && !queried {
            assert!(
                self.page_is_zero(page),
                "context {}'s doorbell page {page:#x} was not cleared: {:02x?}",
                c.result0,
                &self.d.read(page, 64)
            );
        }
    }

    /// Whether the page at `page` (in RAM) reads all zeros (read in place: no copy).
    fn page_is_zero(&self, page: u64) -> bool {
        let at = (page - RAM_BASE) as usize;
        self.d.ram()[at..at + PAGE as usize] == [0u8; PAGE as usize]
    }

    /// Runs the engine and takes completions until neither moves.
    fn settle(&mut self) {
        for _ in 0..8 {
            self.run();
            if self.take() == 0 {
                break;
            }
        }
        self.since_take = 0;
    }

    fn run(&mut self) {
        self.d.run();
        self.d.check_writes(&self.writable);
    }

    /// Lets the device write the sealed pages of the fixture that `len` bytes at `gpa`
    /// touch (a command names them), before the engine sees the command.
    fn unseal(&mut self, gpa: u64, len: u64) {
        let ram = RAM_BASE..self.fx.ram_end;
        let (start, end) = (gpa, gpa.saturating_add(len).min(self.fx.ram_end));
        if ram.contains(&start) && start < end {
            self.d.unseal(start, end - start);
        }
    }

    /// Takes completions, checks them against the model and updates it.
    fn take(&mut self) -> usize {
        let done = self.d.completions();
        let n = done.len();
        for (cmd, c) in done {
            let ok = c.status == ADMIN_STATUS_OK;
            if let Some(kind) = handle_kind(cmd.opcode) {
                if let Some(&owner) = self.m.owner.get(&(kind, cmd.handle)) {
                    if owner != cmd.ctx {
                        assert!(
                            !ok,
                            "context {} used {kind:?} {} of context {owner}: {c:?}",
                            cmd.ctx, cmd.handle
                        );
                    }
                }
            }
            if cmd.opcode == ADMIN_OP_ACCEPT && ok {
                let qp = u32::from_le_bytes(cmd.body[..4].try_into().unwrap());
                if let Some(&owner) = self.m.owner.get(&(Kind::Qp, qp)) {
                    assert_eq!(owner, cmd.ctx, "accept onto another context's QP: {c:?}");
                }
            }
            if cmd.opcode == ADMIN_OP_CREATE_CTX && !self.d.hostile {
                self.check_create_ctx(&cmd, &c);
            }
            if !ok || self.d.hostile {
                continue;
            }
            let ctx = cmd.ctx;
            match cmd.opcode {
                ADMIN_OP_CREATE_CTX => {
                    let id = c.result0 as u32;
                    assert!(
                        id < DOORBELL_PAGES,
                        "context id {id} beyond the device's contexts"
                    );
                    assert!(!self.m.ctxs.contains(&id), "context {id} handed out twice");
                    self.m.ctxs.push(id);
                    self.m.ctx_pages.insert(id, create_ctx_page(&cmd).unwrap());
                }
                ADMIN_OP_DESTROY_CTX => {
                    self.m.ctxs.retain(|&x| x != ctx);
                    self.m.ctx_pages.remove(&ctx);
                    self.m.owner.retain(|_, o| *o != ctx);
                }
                ADMIN_OP_CREATE_CQ | ADMIN_OP_CREATE_QP | ADMIN_OP_LISTEN => {
                    let (kind, slots) = match cmd.opcode {
                        ADMIN_OP_CREATE_CQ => (Kind::Cq, DB_CQ_SLOTS as u64),
                        ADMIN_OP_CREATE_QP => (Kind::Qp, DB_QP_SLOTS as u64),
                        _ => (Kind::Listener, u64::MAX),
                    };
                    assert!(
                        c.result1 < slots || kind == Kind::Listener,
                        "doorbell slot out of the page: {c:?}"
                    );
                    let id = c.result0 as u32;
                    assert!(
                        self.m.owner.insert((kind, id), ctx).is_none(),
                        "{kind:?} id {id} reused: {c:?}"
                    );
                    self.m.ids.push(id);
                }
                ADMIN_OP_REG_MR => {
                    let lkey = c.result0 as u32;
                    self.m.owner.insert((Kind::Mr, lkey), ctx);
                    self.m.lkeys.push(lkey);
                }
                ADMIN_OP_DESTROY_CQ
                | ADMIN_OP_DESTROY_QP
                | ADMIN_OP_DEREG_MR
                | ADMIN_OP_DESTROY_LISTENER => {
                    let kind = handle_kind(cmd.opcode).unwrap();
                    self.m.owner.remove(&(kind, cmd.handle));
                }
                ADMIN_OP_BIND => {
                    let asked = u16::from_le_bytes(cmd.body[16..18].try_into().unwrap());
                    assert!(
                        c.result0 != 0 && (asked == 0 || c.result0 == asked as u64),
                        "bind result: {c:?}"
                    );
                }
                _ => {}
            }
        }
        n
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut d = SyncDevice::with_ram(RAM);
    let fx = fixture(&mut d);
    d.check_writes(&Writable::default());
    let mut writable = Writable::default();
    writable.add(ADMIN_CQ, ADMIN_DEPTH as u64 * 32);
    let mut h = Harness {
        d,
        m: Model::default(),
        fx,
        since_take: 0,
        writable,
    };
    for _ in 0..200 {
        if input.is_empty() {
            break;
        }
        match input.choose(12) {
            0..=4 => {
                let claimed = || h.claimed_pages();
                let c = structured(&mut input, &h.m, &h.fx, &claimed);
                h.submit(c);
            }
            5 => {
                let raw: [u8; 64] = input.array();
                let c = zerocopy::FromBytes::read_from_bytes(&raw[..]).unwrap();
                h.submit(c);
            }
            6 | 7 => h.settle(),
            // Run without taking completions: the completion ring fills, the device must
            // stop fetching and keep waiting completions for later.
            8 => h.run(),
            9 => {
                h.d.reset();
                h.m = Model {
                    query_bufs: std::mem::take(&mut h.m.query_bufs),
                    ..Model::default()
                };
                h.since_take = 0;
            }
            10 => {
                // A driver that lies about its indices: the device may re-run old commands
                // or overwrite unconsumed completions, but must stay sane.
                h.d.hostile = true;
                let v = input.u32();
                if input.bool() {
                    h.d.control(Control::AdminSqTail(v));
                } else {
                    h.d.control(Control::AdminCqHead(v));
                }
                h.run();
            }
            _ => {
                // The driver sets the admin queue up again (indices back to 0); commands in
                // flight are forgotten by both sides.
                h.settle();
                h.d.enable_admin();
                h.since_take = 0;
            }
        }
    }
    h.settle();
    if h.d.hostile {
        return;
    }
    // ASYNC_EVENT requests wait for an event, for as long as the device runs.
    for (id, c) in &h.d.outstanding {
        assert!(
            matches!(
                c.opcode,
                ADMIN_OP_ACCEPT | ADMIN_OP_CONNECT | ADMIN_OP_CLOSE | ADMIN_OP_ASYNC_EVENT
            ),
            "command {id} ({:#x}) never completed: {c:?}",
            c.opcode
        );
    }
    // Destroying every context must release every waiting command (CANCELLED).
    for ctx in h.m.ctxs.clone() {
        h.submit(cmd0(ADMIN_OP_DESTROY_CTX, ctx, 0));
    }
    h.settle();
    assert!(
        h.d.outstanding
            .values()
            .all(|c| c.opcode == ADMIN_OP_ASYNC_EVENT),
        "commands still waiting after all contexts were destroyed: {:?}",
        h.d.outstanding
    );
});
