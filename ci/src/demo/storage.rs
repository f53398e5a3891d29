//! The bench's storage part: a network disk between guests a and b, as the QPIP paper
//! measured NBD. Guest b exports one file on its tmpfs ([`StorageFacts::export_bytes`]) with
//! `qpip-nbd serve` (over its qpip device's TCP QPs) and with the stock `nbd-server` (over
//! its kernel sockets); guest a uses it as a block device three ways ([`Pair`]):
//! - `qp`: `qpip-nbd connect` (a ublk device, every request over a TCP QP);
//! - `sockets`: the stock `nbd-client` (the kernel's nbd driver) against `nbd-server`,
//!   both on kernel sockets through virtio-net: the baseline;
//! - `mixed`: the stock `nbd-client` against `qpip-nbd serve` (interoperability: the
//!   server side's share of the gain).
//!
//! Each way, each round: an ext2 file system is made on the disk, guest a's file of
//! [`StorageFacts::file_bytes`] (random, made once) is written to it and flushed with
//! `sync` (the write phase), the file system unmounted, guest a's caches dropped, mounted
//! again and the file read back (the read phase), its SHA-256 then compared from the page
//! cache, outside the phase. Over `qp` and `sockets` fio then reads 4 KiB blocks at random
//! from the raw device with direct I/O, at each of [`StorageFacts::fio_depths`].
//!
//! Every phase is a window ([`super::scripts::STEPS_A`]'s CPU marks: both guests' `/proc/stat`
//! and the host's CPU of QEMU and qpipd at its edges), and guest a reports it as
//! `@storage.NAME=BYTES T0 T1|DEV0|DEV1|IRQA0|IRQA1|IRQB0|IRQB1`: the bytes it moved, guest
//! a's uptime at its edges, the device's `/sys/block/DEV/stat` at its edges (requests,
//! sectors, time in queue), and the interrupts of each guest's qpip device and virtio-net
//! NIC (`QPIP VIRTIO`, from `/proc/interrupts`) at its edges; fio's JSON follows as
//! `@fio.NAME=JSON`. NAME is `write-qp`, `read-sk`, `fio16-qp`, ..., with `.ROUND` in a run
//! of several rounds (see [`super::results::storage`]).
//!
//! The three ways take turns to go first round by round, so a drift of the host's load
//! hits them alike.

use super::pass::{run_pass, PassSpec};
use super::results::storage::{StorageFacts, StorageRun};
use super::scripts::{serve_marks, COMMON, STEPS_A};
use super::{human, DemoError, Step};
use crate::netns;
use std::time::Duration;

/// Guest b's `qpip-nbd serve` port (its default) and the stock `nbd-server`'s.
pub const QP_NBD_PORT: u16 = 10809;
pub const STOCK_NBD_PORT: u16 = 10810;

/// A client and server pair the storage part measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pair {
    /// `qpip-nbd connect` against `qpip-nbd serve`, over QPs.
    Qp,
    /// The stock `nbd-client` against the stock `nbd-server`, over kernel sockets.
    Sockets,
    /// The stock `nbd-client` against `qpip-nbd serve`.
    Mixed,
}

impl Pair {
    pub const ALL: [Pair; 3] = [Pair::Qp, Pair::Sockets, Pair::Mixed];

    /// The second half of its phases' names (`qp` in `write-qp`).
    pub fn id(self) -> &'static str {
        match self {
            Pair::Qp => "qp",
            Pair::Sockets => "sk",
            Pair::Mixed => "mx",
        }
    }

    /// Its name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Pair::Qp => "qp",
            Pair::Sockets => "sockets",
            Pair::Mixed => "mixed",
        }
    }

    /// What it is, for the progress lines.
    pub fn what(self) -> &'static str {
        match self {
            Pair::Qp => "qpip-nbd connect (ublk) → qpip-nbd serve, over QPs",
            Pair::Sockets => {
                "stock nbd-client → stock nbd-server, over kernel sockets (virtio-net)"
            }
            Pair::Mixed => "stock nbd-client (kernel sockets) → qpip-nbd serve (QPs)",
        }
    }

    /// Whether fio's random reads run over it too.
    pub fn fio(self) -> bool {
        self != Pair::Mixed
    }
}

/// How much the storage part measures.
#[derive(Debug, Clone)]
pub struct StoragePlan {
    /// What it measures, which its report states.
    pub facts: StorageFacts,
    /// Limit for one round (the first includes the boot).
    pub round_timeout: Duration,
    pub layout: crate::QpipdLayout,
    pub qpipd_args: Vec<String>,
}

impl StoragePlan {
    /// The bench's: 409 MB (the QPIP paper's file) on a 512 MiB disk, fio at depths 1 and
    /// 16 for 10 s each, three rounds.
    pub fn bench() -> StoragePlan {
        StoragePlan {
            facts: StorageFacts {
                rounds: 3,
                file_bytes: 409_000_000,
                export_bytes: 512 << 20,
                fio_depths: vec![1, 16],
                fio_secs: 10,
                memory_mib: 1536,
                export_filled: true,
            },
            round_timeout: Duration::from_secs(1200),
            layout: crate::QpipdLayout::Adapter,
            qpipd_args: Vec::new(),
        }
    }

    /// Limit for the whole run, boot to power-off.
    pub fn limit(&self) -> Duration {
        self.round_timeout * self.facts.rounds.max(1)
    }

    /// `base` in round `round`: `base.ROUND` in a run of several rounds.
    pub fn tag(&self, base: &str, round: u32) -> String {
        if self.facts.rounds > 1 {
            format!("{base}.{round}")
        } else {
            base.to_string()
        }
    }

    /// The pairs of round `round` in the order they run: each round starts one further on.
    pub fn order(&self, round: u32) -> Vec<Pair> {
        let mut v = Pair::ALL.to_vec();
        let n = v.len();
        v.rotate_left((round.max(1) as usize - 1) % n);
        v
    }

    /// The id of the step of `pair` in round `round`: `storage-qp.2`.
    pub fn step_id(&self, pair: Pair, round: u32) -> String {
        self.tag(&format!("storage-{}", pair.id()), round)
    }

    /// The steps guest a runs, in order: getting ready, then every pair in every round.
    pub fn steps(&self) -> Vec<Step> {
        let mut s = vec![Step {
            id: "storage-ready".into(),
            what: format!(
                "guest b exports a {} file with qpip-nbd serve (QPs) and nbd-server (kernel \
                 sockets); guest a makes its {} MB file",
                human(self.facts.export_bytes),
                self.facts.file_bytes / 1_000_000
            ),
            action: super::Action::Ready,
        }];
        for round in 1..=self.facts.rounds.max(1) {
            let note = if self.facts.rounds > 1 {
                format!("round {round}/{}: ", self.facts.rounds)
            } else {
                String::new()
            };
            for pair in self.order(round) {
                let fio = if pair.fio() {
                    format!(
                        ", then fio 4 KiB random reads at depth {}",
                        self.facts
                            .fio_depths
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )
                } else {
                    String::new()
                };
                s.push(Step {
                    id: self.step_id(pair, round),
                    what: format!(
                        "{note}{}: ext2, {} MB written + sync, remounted, read back{fio}",
                        pair.what(),
                        self.facts.file_bytes / 1_000_000
                    ),
                    // (The watcher reads only a step's id and description.)
                    action: super::Action::Ready,
                });
            }
        }
        s
    }
}

/// Helpers of both guests: the interrupts of the guest's qpip device and of its virtio-net
/// NIC (eth0) so far, `QPIP VIRTIO` (each line of /proc/interrupts: the IRQ, a count per
/// CPU, then the chip and the name, last).
pub(super) const IRQS: &str = r#"
NIC=$(basename "$(readlink -f /sys/class/net/eth0/device)")
irqs() {
    awk -v nic="$NIC-" 'NR > 1 {
        n = 0
        for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i
        if ($NF ~ /^qpip/) q += n; else if (index($NF, nic) == 1) v += n
    } END { printf "%d %d\n", q, v }' /proc/interrupts
}
"#;

/// Guest b: both servers on one file, then the CPU marks' answers until guest a is done.
pub fn guest_b(plan: &StoragePlan) -> String {
    let wait_secs = plan.limit().as_secs() + 60;
    format!(
        r#"{COMMON}{IRQS}
bfail() {{ s=$1; shift; echo "@fail=$s: $*"; touch /lab/b-failed; exit 1; }}
lab-storage > /tmp/storage 2>&1 || bfail storage-ready "lab-storage: $(oneline /tmp/storage)"
# Filled, as a disk's blocks exist: a write overwrites what is there (a sparse file would
# have tmpfs allocate and zero every page the write touches first, work no disk does).
dd if=/dev/zero of=/tmp/disk.img bs=1048576 count={export_mib} 2> /dev/null || bfail storage-ready "cannot make /tmp/disk.img"
qpip-nbd serve /tmp/disk.img -n disk -p {QP_NBD_PORT} > /tmp/serve.log 2>&1 &
mkdir -p /run /var/run
cat > /tmp/nbd.conf <<'CONF'
[generic]
    user = root
    group = root
    port = {STOCK_NBD_PORT}
[disk]
    exportname = /tmp/disk.img
    flush = true
    fua = true
    trim = true
CONF
nbd-server -C /tmp/nbd.conf > /tmp/nbd-server.log 2>&1 || bfail storage-ready "nbd-server failed: $(oneline /tmp/nbd-server.log)"
until_true 60 has /tmp/serve.log serving || bfail storage-ready "qpip-nbd serve is not serving: $(oneline /tmp/serve.log)"
until_true 60 listening {STOCK_NBD_PORT} || bfail storage-ready "nbd-server is not listening on {STOCK_NBD_PORT}"
touch /lab/b-ready
# The CPU marks' answers: the first line of /proc/stat and the interrupts so far.
{marks}failed=$(grep -c 'the disk answered' /tmp/serve.log)
[ "$failed" = 0 ] || echo "qpip-nbd serve: $failed failed disk operations: $(grep 'the disk answered' /tmp/serve.log | head -n 3 | tr '\n' ' ')"
"#,
        export_mib = plan.facts.export_bytes >> 20,
        marks = serve_marks(wait_secs, r#"printf '%s\n%s\n' "$l" "$(irqs)""#),
    )
}

/// Guest a: every step in order.
pub fn guest_a(plan: &StoragePlan) -> String {
    let file = plan.facts.file_bytes;
    let qp_addr = netns::device_addr(2);
    let sk_addr = netns::virtio_addr(2);
    let fio_secs = plan.facts.fio_secs;
    let mut s = format!(
        r#"{COMMON}{IRQS}
trap 'touch /lab/a-done' EXIT
{STEPS_A}
devstat() {{ cat /sys/block/${{DEV#/dev/}}/stat; }}
# win_start, then win_end NAME BYTES: the edges of phase NAME, which moved BYTES; its CPU
# window, and @storage.NAME=BYTES T0 T1|DEV0|DEV1|IRQA0|IRQA1|IRQB0|IRQB1.
win_start() {{
    cpu_start
    IRQ_B0=$(sed -n 2p /lab/cpu-mark.$MARK.b)
    IRQ_A0=$(irqs); DEV0=$(devstat); T0=$(now)
}}
win_end() {{
    T1=$(now); DEV1=$(devstat); IRQ_A1=$(irqs)
    cpu_end $1
    IRQ_B1=$(sed -n 2p /lab/cpu-mark.$MARK.b)
    echo "@storage.$1=$2 $T0 $T1|$DEV0|$DEV1|$IRQ_A0|$IRQ_A1|$IRQ_B0|$IRQ_B1"
}}
# connect_qp: qpip-nbd connect to guest b's qpip-nbd serve; DEV is its ublk device.
connect_qp() {{
    qpip-nbd connect {qp_addr} -p {QP_NBD_PORT} -n disk > /tmp/connect.log 2>&1 &
    C=$!
    until_true 30 has /tmp/connect.log '^qpip-nbd: /dev/ublkb' \
        || fail "qpip-nbd connect made no device: $(oneline /tmp/connect.log)"
    DEV=$(sed -n 's|^qpip-nbd: \(/dev/ublkb[0-9]*\) .*|\1|p' /tmp/connect.log)
}}
disconnect_qp() {{
    kill -TERM $C
    wait $C || fail "qpip-nbd connect ended with status $?: $(oneline /tmp/connect.log)"
}}
# connect_stock ADDR PORT: the stock nbd-client; DEV is /dev/nbd0 once it has a size.
sized() {{ [ "$(cat /sys/block/nbd0/size)" != 0 ]; }}
connect_stock() {{
    nbd-client -N disk $1 $2 /dev/nbd0 > /tmp/connect.log 2>&1 \
        || fail "nbd-client $1 $2 failed: $(oneline /tmp/connect.log)"
    until_true 10 sized || fail "/dev/nbd0 has no size after nbd-client $1 $2"
    DEV=/dev/nbd0
}}
disconnect_stock() {{
    nbd-client -d /dev/nbd0 > /tmp/connect.log 2>&1 || fail "nbd-client -d failed: $(oneline /tmp/connect.log)"
    # The next connection needs the device free: give the driver a moment to let it go.
    until_true 10 eval '! sized' || true
}}
# fs NAME: ext2 on DEV; the file written and synced (write-NAME), read back after a
# remount with the caches dropped (read-NAME), its SHA-256 compared.
fs() {{
    # No discard: it would punch the export's blocks out of guest b's file again (both
    # servers offer TRIM), and the write would pay for their allocation.
    mkfs.ext2 -q -E nodiscard "$DEV" > /tmp/mkfs 2>&1 || fail "mkfs.ext2 $DEV failed: $(oneline /tmp/mkfs)"
    mount -t ext2 "$DEV" /mnt || fail "mount $DEV failed"
    sync; echo 3 > /proc/sys/vm/drop_caches
    win_start
    cat /tmp/f > /mnt/f || fail "writing {file} bytes to $DEV failed"
    sync || fail "sync failed"
    win_end write-$1 {file}
    umount /mnt || fail "umount $DEV failed"
    echo 3 > /proc/sys/vm/drop_caches
    mount -t ext2 -o ro "$DEV" /mnt || fail "mounting $DEV again failed"
    win_start
    cat /mnt/f > /dev/null || fail "reading the file back from $DEV failed"
    win_end read-$1 {file}
    got=$(sha /mnt/f)
    [ "$got" = "$SHA" ] || fail "read back other bytes: SHA-256 $got, wrote $SHA"
    umount /mnt || fail "umount $DEV failed"
}}
# fio_reads NAME DEPTH: fio's 4 KiB random reads of DEV, direct, at queue depth DEPTH.
fio_reads() {{
    win_start
    fio --name=randread --filename="$DEV" --rw=randread --bs=4k --direct=1 \
        --ioengine=libaio --iodepth=$2 --ramp_time=1 --runtime={fio_secs} --time_based \
        --thread --output-format=json > /tmp/fio.json 2> /tmp/fio.err \
        || fail "fio at depth $2 failed: $(oneline /tmp/fio.err)"
    win_end $1 0
    echo "@fio.$1=$(tr -d '\n' < /tmp/fio.json)"
}}
mkdir -p /mnt
"#
    );
    let ready = format!(
        r#"lab-storage > /tmp/storage 2>&1 || fail "lab-storage: $(oneline /tmp/storage)"
command -v fio > /dev/null || fail "no fio in the extras share (images/bench-extras.sh adds it)"
head -c {file} /dev/urandom > /tmp/f
SHA=$(sha /tmp/f)
await b-ready 180
"#
    );
    s += &format!("\nstep storage-ready\n{ready}ok\n");
    for round in 1..=plan.facts.rounds.max(1) {
        for pair in plan.order(round) {
            let name = plan.tag(pair.id(), round);
            let (connect, disconnect) = match pair {
                Pair::Qp => ("connect_qp".to_string(), "disconnect_qp"),
                Pair::Sockets => (
                    format!("connect_stock {sk_addr} {STOCK_NBD_PORT}"),
                    "disconnect_stock",
                ),
                Pair::Mixed => (
                    format!("connect_stock {qp_addr} {QP_NBD_PORT}"),
                    "disconnect_stock",
                ),
            };
            let mut body = format!("{connect}\nfs {name}\n");
            if pair.fio() {
                for d in &plan.facts.fio_depths {
                    body += &format!(
                        "fio_reads {} {d}\n",
                        plan.tag(&format!("fio{d}-{}", pair.id()), round)
                    );
                }
            }
            body += disconnect;
            let id = plan.step_id(pair, round);
            s += &format!("\nstep {id}\n{body}\nok\n");
        }
    }
    s
}

/// Boots guests a and b with [`StorageFacts::memory_mib`] each in namespace `netns` and
/// runs the storage part; its figures, every round's.
pub fn run(
    plan: &StoragePlan,
    netns: &str,
    verbose: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(StorageRun, Duration), DemoError> {
    let spec = PassSpec {
        guests: "guests a and b",
        guest_a: guest_a(plan),
        guest_b: guest_b(plan),
        steps: plan.steps(),
        rounds: plan.facts.rounds,
        memory_mib: plan.facts.memory_mib,
        limit: plan.limit(),
        layout: plan.layout,
        qpipd_args: &plan.qpipd_args,
    };
    let out = run_pass(spec, netns, verbose, progress)?;
    // qpip-nbd serve's failed disk operations, which guest b reports at its end.
    if let Some(b) = out.outcome.guests.get(1) {
        if let Some(l) = b.output.lines().find(|l| l.starts_with("qpip-nbd serve: ")) {
            return Err(out.fail(format!("guest b: {l}")));
        }
    }
    let run =
        StorageRun::from_lines(plan, &out.lines_a, &out.measurements).map_err(|e| out.fail(e))?;
    Ok((run, out.elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_take_turns_to_go_first_and_only_qp_and_sockets_run_fio() {
        let plan = StoragePlan::bench();
        let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
        assert_eq!(
            ids,
            [
                "storage-ready",
                "storage-qp.1",
                "storage-sk.1",
                "storage-mx.1",
                "storage-sk.2",
                "storage-mx.2",
                "storage-qp.2",
                "storage-mx.3",
                "storage-qp.3",
                "storage-sk.3"
            ]
        );
        let a = guest_a(&plan);
        for (i, id) in ids.iter().enumerate() {
            let at = a.find(&format!("\nstep {id}\n")).expect(id);
            if i > 0 {
                assert!(at > a.find(&format!("\nstep {}\n", ids[i - 1])).unwrap());
            }
        }
        assert!(a.contains("\nstep storage-qp.2\nconnect_qp\nfs qp.2\nfio_reads fio1-qp.2 1\nfio_reads fio16-qp.2 16\ndisconnect_qp\nok\n"), "{a}");
        assert!(a.contains("\nstep storage-mx.1\nconnect_stock fd51:5050::1:2 10809\nfs mx.1\ndisconnect_stock\nok\n"), "{a}");
        assert!(
            a.contains("connect_stock fd51:5050::2:2 10810\nfs sk.3\nfio_reads fio1-sk.3 1\n"),
            "{a}"
        );
        assert!(a.contains("head -c 409000000 /dev/urandom > /tmp/f"), "{a}");
        assert!(
            a.contains("--iodepth=$2 --ramp_time=1 --runtime=10 "),
            "{a}"
        );
        let b = guest_b(&plan);
        assert!(
            b.contains("dd if=/dev/zero of=/tmp/disk.img bs=1048576 count=512"),
            "{b}"
        );
        assert!(b.contains("exportname = /tmp/disk.img"), "{b}");
        // One round: names without round numbers.
        let mut one = StoragePlan::bench();
        one.facts.rounds = 1;
        assert!(guest_a(&one).contains("\nfs qp\nfio_reads fio1-qp 1\n"));
    }

    #[test]
    fn the_storage_scripts_are_valid_shell() {
        let plan = StoragePlan::bench();
        for script in [guest_a(&plan), guest_b(&plan)] {
            crate::demo::assert_valid_shell(&script);
        }
    }
}
