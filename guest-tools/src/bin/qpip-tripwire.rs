//! `qpip-tripwire`: a ring buffer whose consumer sleeps until the next record is written,
//! woken by tripwires. Two iWARP QPs of one context connect over the device's loopback
//! (`::1`); the consumer's ring of `--slots` records is registered for RDMA Writes and named
//! to the producer in the MPA private data; the producer RDMA-Writes `--records` records
//! into it, around the ring, then one closing record into a slot of its own.
//!
//! The consumer never polls the ring. A tripwire watches the last 8 bytes of each slot (an
//! in-order write fills them last); the consumer sleeps on the tripwires' CQ descriptor
//! (the CQ armed, then `poll(2)`) until one fires, checks the record's every byte, re-arms
//! that slot's tripwire and only then hands the slot back to the producer. So every record
//! lands in a slot whose tripwire is armed and must cause exactly one event, and the
//! events come in record order, each naming its slot (tag), its tripwire (id), the 8 bytes
//! and their address. The closing record's event must come right after the last data
//! record's: a data record's event that came twice would come before it (the device
//! reports placements in order), a missed one would leave the consumer waiting. One more
//! tripwire watches the whole ring and is never armed: it must never fire. It is made on
//! the arm word of a tripwire armed and dropped before, which the library must hand out
//! again as a disarmed one.
//!
//! `qpip-tripwire [--records N] [--slots S] [--size BYTES] [--port P] [--name TAG]`
//! (defaults 1000, 8, 256, 7400, `ring`). Reports `@TAG.*` facts and `@check.TAG.*` lines
//! and exits 1 when a check failed (the VM test `ci/tests/verbs.rs` asserts on them).

use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

use qpip::{
    Access, Completion, Context, Cq, EventKind, Framing, MemoryRegion, Mpa, Opcode, Qp, QpInit,
    QpKind, RemoteAddr, SendWr, Status, Tripwire,
};

/// Longest any single wait may take (a TCG guest on a busy host is slow): a record whose
/// event does not come within it was missed.
const T: Duration = Duration::from_secs(30);

type R<T = ()> = Result<T, String>;

fn q<T>(r: qpip::Result<T>, what: &str) -> R<T> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> R {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

struct Args {
    records: u64,
    slots: u64,
    size: usize,
    port: u16,
    name: String,
}

const USAGE: &str =
    "usage: qpip-tripwire [--records N] [--slots S] [--size BYTES] [--port P] [--name TAG]";

fn args() -> R<Args> {
    let mut a = Args {
        records: 1000,
        slots: 8,
        size: 256,
        port: 7400,
        name: "ring".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--records" => a.records = num(&v)?,
            "--slots" => a.slots = num(&v)?,
            "--size" => a.size = num(&v)? as usize,
            "--port" => a.port = num(&v)? as u16,
            "--name" => a.name = v,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    ensure((1..=255).contains(&a.slots), || "--slots: 1 to 255".into())?;
    ensure(
        (24..=4096).contains(&a.size) && a.size.is_multiple_of(8),
        || "--size: a multiple of 8 from 24 to 4096".into(),
    )?;
    ensure(a.port != 0, || "--port: not 0".into())?;
    Ok(a)
}

// ---- records -------------------------------------------------------------------------------

/// Record `seq`: its number in its first and last 8 bytes, a pattern of it between.
fn fill_record(buf: &mut [u8], seq: u64) {
    let n = buf.len();
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (j, b) in buf[8..n - 8].iter_mut().enumerate() {
        *b = pattern(seq, j);
    }
    buf[n - 8..].copy_from_slice(&seq.to_le_bytes());
}

fn pattern(seq: u64, j: usize) -> u8 {
    (seq.wrapping_mul(131) ^ (j as u64).wrapping_mul(7)) as u8
}

/// Whether `buf` holds record `seq`, byte for byte.
fn check_record(buf: &[u8], seq: u64) -> R {
    let n = buf.len();
    let head = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    let tail = u64::from_le_bytes(buf[n - 8..].try_into().expect("8 bytes"));
    ensure(head == seq && tail == seq, || {
        format!("record {seq}: its slot holds {head} ... {tail}")
    })?;
    match buf[8..n - 8]
        .iter()
        .enumerate()
        .find(|&(j, &b)| b != pattern(seq, j))
    {
        Some((j, b)) => Err(format!("record {seq}: byte {} is {b:#x}", j + 8)),
        None => Ok(()),
    }
}

/// Where the ring is, as the consumer's MPA private data: address and rkey.
fn ring_pd(at: RemoteAddr) -> Vec<u8> {
    let mut pd = at.addr.to_le_bytes().to_vec();
    pd.extend_from_slice(&at.rkey.to_le_bytes());
    pd
}

fn ring_of_pd(pd: &[u8]) -> R<RemoteAddr> {
    ensure(pd.len() == 12, || {
        format!("{} bytes of private data, expected 12", pd.len())
    })?;
    Ok(RemoteAddr {
        addr: u64::from_le_bytes(pd[..8].try_into().expect("8 bytes")),
        rkey: u32::from_le_bytes(pd[8..].try_into().expect("4 bytes")),
    })
}

// ---- the producer ----------------------------------------------------------------------------

struct Producer {
    qp: Qp,
    cq: Cq,
    src: MemoryRegion,
    records: u64,
    slots: u64,
    /// One per slot the consumer hands back.
    credits: mpsc::Receiver<()>,
}

/// Records 0 .. `records` into slot `i % slots` of the ring, record `i` once the consumer
/// handed its slot back (after it consumed record `i - slots`); then the closing record,
/// `records`, into slot `slots`. Each write is waited for, so one source buffer does.
fn produce(mut p: Producer) -> R {
    let info = q(p.qp.conn_info(), "what the connection agreed")?;
    let ring = ring_of_pd(&info.private_data)?;
    let size = p.src.len() as u64;
    for i in 0..=p.records {
        let slot = if i == p.records {
            p.slots
        } else {
            if i >= p.slots {
                p.credits
                    .recv_timeout(T)
                    .map_err(|_| format!("record {i}: no slot handed back within {T:?}"))?;
            }
            i % p.slots
        };
        fill_record(&mut p.src, i);
        let to = RemoteAddr {
            addr: ring.addr + slot * size,
            rkey: ring.rkey,
        };
        q(
            p.qp.post_send(&SendWr::rdma_write(i, &[p.src.sge_all()], to)),
            "post an RDMA Write",
        )?;
        let c = q(p.cq.wait_one(Some(T)), "wait for an RDMA Write")?.ok_or(format!(
            "record {i}: the write did not complete within {T:?}"
        ))?;
        ensure(
            c.is_ok() && c.opcode == Opcode::RdmaWrite && c.wr_id == i,
            || format!("record {i}: the write completed {c:?}"),
        )?;
    }
    Ok(())
}

// ---- the consumer ----------------------------------------------------------------------------

struct Consumer {
    ring: MemoryRegion,
    events: Cq,
    /// Slot `s`'s (tag `s`); the last is the closing record's.
    tripwires: Vec<Tripwire>,
    size: usize,
    slots: u64,
}

#[derive(Default)]
struct Tally {
    events: u64,
    sleeps: u64,
    bytes: u64,
}

impl Consumer {
    /// The next event of the tripwires' CQ: polled; else the CQ armed, polled once more
    /// (an event may have come before the arm), and the consumer asleep on its descriptor
    /// until it is readable.
    fn next_event(&self, tally: &mut Tally) -> R<Completion> {
        loop {
            if let Some(c) = self.events.poll_one() {
                return Ok(c);
            }
            q(self.events.arm(), "arm the CQ")?;
            if let Some(c) = self.events.poll_one() {
                return Ok(c);
            }
            let mut p = libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, the CQ's eventfd, open while `self` lives.
            let n = unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("poll on the CQ's descriptor: {e}"));
            }
            ensure(n > 0, || format!("no tripwire event within {T:?}"))?;
            tally.sleeps += 1;
            self.events.ack();
        }
    }

    /// Takes record `seq` from `slot`: its event (the slot's tripwire, 8 bytes at the
    /// slot's end), then its bytes.
    fn take(&self, seq: u64, slot: u64, tally: &mut Tally) -> R {
        let e = self.next_event(tally)?;
        let tw = &self.tripwires[slot as usize];
        let start = slot as usize * self.size;
        let end = self.ring.remote(start + self.size - 8).addr;
        ensure(
            e.opcode == Opcode::Tripwire
                && e.status == Status::Success
                && e.wr_id == slot
                && e.qp == tw.id()
                && e.byte_len == 8
                && e.addr == end,
            || {
                format!(
                    "record {seq}: expected the event of slot {slot} (tripwire {}, 8 bytes \
                     at {end:#x}), got {e:?}",
                    tw.id()
                )
            },
        )?;
        tally.events += 1;
        check_record(&self.ring[start..start + self.size], seq)?;
        tally.bytes += self.size as u64;
        Ok(())
    }

    /// Records 0 .. `records` in order, each slot re-armed and handed back after its
    /// record if another will come into it; then the closing record, and nothing after.
    fn consume(&self, records: u64, credits: &mpsc::Sender<()>) -> R<Tally> {
        let mut tally = Tally::default();
        for seq in 0..records {
            let slot = seq % self.slots;
            self.take(seq, slot, &mut tally)?;
            if seq + self.slots < records {
                // Armed before the producer may write the slot again: that write must fire.
                self.tripwires[slot as usize].arm();
                credits
                    .send(())
                    .map_err(|_| format!("record {seq}: the producer is gone"))?;
            }
        }
        self.take(records, self.slots, &mut tally)
            .map_err(|e| format!("the closing record: {e}"))?;
        if let Some(e) = self.events.poll_one() {
            return Err(format!("an event after the closing record: {e:?}"));
        }
        Ok(tally)
    }
}

// ---- the run ---------------------------------------------------------------------------------

fn lo(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)
}

/// Sets up the ring, its tripwires and the connection, then runs the producer in a thread
/// and the consumer here.
fn run(a: &Args) -> R<Tally> {
    let ctx = q(Context::open(), "open a context")?;
    let size = a.size;
    let slots = a.slots as usize;
    // The data slots and the closing record's.
    let ring = q(
        ctx.alloc_with((slots + 1) * size, Access::WRITE),
        "register the ring",
    )?;
    // At most one event per tripwire is outstanding (and the quiet one's, if it fired).
    let depth = (slots as u32 + 2).next_power_of_two();
    let events = q(ctx.create_cq(depth), "create the tripwires' CQ")?;
    let tripwires = (0..=slots)
        .map(|s| {
            let end = (s + 1) * size;
            q(
                ctx.create_tripwire(&ring, end - 8, 8, &events, s as u64),
                "create a tripwire",
            )
        })
        .collect::<R<Vec<Tripwire>>>()?;
    // The quiet tripwire, on the word of one armed and dropped before (the page of words
    // kept by the others): it starts disarmed all the same.
    let gone = q(
        ctx.create_tripwire(&ring, 0, ring.len(), &events, u64::MAX),
        "create a tripwire",
    )?;
    gone.arm();
    gone.arm();
    drop(gone);
    let _quiet = q(
        ctx.create_tripwire(&ring, 0, ring.len(), &events, u64::MAX),
        "create a tripwire",
    )?;
    println!(
        "@{}.tripwire_ids={}",
        a.name,
        tripwires
            .iter()
            .map(|t| t.id().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Armed before anything is written: the first round of the ring and the closing slot.
    for (s, tw) in tripwires.iter().enumerate() {
        if s == slots || (s as u64) < a.records {
            tw.arm();
        }
    }

    let ccq = q(ctx.create_cq(16), "create a CQ")?;
    let pcq = q(ctx.create_cq(16), "create a CQ")?;
    let iwarp = QpKind::Tcp(Framing::Iwarp);
    let consumer = q(ctx.create_qp(&QpInit::new(iwarp, &ccq)), "create a QP")?;
    let producer = q(ctx.create_qp(&QpInit::new(iwarp, &pcq)), "create a QP")?;
    let listener = q(ctx.listen(lo(a.port), 1), "listen")?;
    let mpa = Mpa::new().private_data(&ring_pd(ring.remote(0)));
    q(listener.accept_mpa(&consumer, &mpa, 1), "accept")?;
    q(
        producer.connect_mpa_wait(lo(a.port), &Mpa::new(), T),
        "connect",
    )?;
    let accepted = q(
        ctx.wait_event_for(consumer.id(), EventKind::Accept, Some(T)),
        "accept",
    )?
    .ok_or(format!("no accept within {T:?}"))?;
    ensure(accepted.status == 0, || format!("accept: {accepted:?}"))?;

    let (credit, credits) = mpsc::channel();
    let p = Producer {
        qp: producer,
        cq: pcq,
        src: q(ctx.alloc(size), "register the source buffer")?,
        records: a.records,
        slots: a.slots,
        credits,
    };
    let thread = std::thread::spawn(move || produce(p));
    let c = Consumer {
        ring,
        events,
        tripwires,
        size,
        slots: a.slots,
    };
    let consumed = c.consume(a.records, &credit);
    // A consumer that failed hands no more slots back: the producer stops at once.
    drop(credit);
    let produced = thread
        .join()
        .unwrap_or_else(|_| Err("the producer panicked".into()));
    let tally = consumed?;
    produced.map_err(|e| format!("producer: {e}"))?;
    Ok(tally)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("qpip-tripwire: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let n = &a.name;
    println!("@{n}.records={}", a.records);
    println!("@{n}.slots={}", a.slots);
    let failed = match run(&a) {
        Ok(t) => {
            println!("@{n}.events={}", t.events);
            println!("@{n}.sleeps={}", t.sleeps);
            println!("@{n}.bytes_checked={}", t.bytes);
            println!("@check.{n}.ring=ok");
            0
        }
        Err(e) => {
            println!("@check.{n}.ring=FAIL: {e}");
            1
        }
    };
    println!("@failed={failed}");
    std::process::exit(failed);
}
