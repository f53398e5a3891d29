//! VM tests of the verbs library (`qpip`, guest-lib) on the device: a real guest, real
//! qpipd, the real qpip.ko, and `qpip-verbs-test` calling the library's API over
//! `/dev/qpip0` — UDP and TCP between QPs over the device's own loopback, every error the
//! API reports, many QPs on one CQ, CQ overflow, blocking waits, epoll, and the async
//! adapter (tokio) woken by the device's interrupts; and `qpip-tripwire`, a ring buffer
//! over iWARP whose consumer tripwires wake.
//!
//! Like the other VM tests they boot a guest, so they are ignored by a plain `cargo test`
//! and run with `-- --ignored`. The guest reports `@key=value` lines; the assertions are
//! made here, so a failure shows the guest's whole report.

mod common;

use common::Report;

/// Every check of `qpip-verbs-test` on the device; then twice at once, in two processes
/// (two contexts sharing the device).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_verbs_api_on_the_device() {
    let out = common::boot(&common::vm(
        r#"
qpip-verbs-test; kv verbs.status $?
qpip-verbs-test > /tmp/p1.out 2>&1 & p1=$!
qpip-verbs-test > /tmp/p2.out 2>&1; kv parallel.second.status $?
wait $p1; kv parallel.first.status $?
kv parallel.failures "$(cat /tmp/p1.out /tmp/p2.out | grep FAIL | tr '\n' ' ')"
"#,
    ));
    let rep = Report::succeeded(&out);
    assert_eq!(
        rep.get("verbs.status"),
        "0",
        "qpip-verbs-test\n{}",
        rep.context()
    );
    assert_eq!(rep.get("provider"), "Device", "{}", rep.context());
    rep.checks_pass(&[
        "open",
        "udp.scatter_gather",
        "udp.errors",
        "post.errors",
        "tcp.messages",
        "tcp.stream",
        "tcp.refused_and_cancelled",
        "cq.many_qps",
        "cq.overflow",
        "cq.wait_wakeups",
        "epoll",
        "doorbell.quiet_receives",
        "post.cost",
        "aio.tasks_share_a_cq",
        "aio.timed_out_waits",
        "aio.connections",
        "device.counters",
    ]);
    assert_eq!(rep.get("tcp_stream.bytes"), "262144");
    assert_eq!(rep.get("many_qps.qps"), "16");
    assert_eq!(rep.get("wait.wakeups"), "5");
    // Posting on the device allocates nothing (entries and kept regions are held in
    // place, inline bytes go straight into the WQE). Counted, not timed.
    for kind in ["recv", "send_inline", "send_gather"] {
        assert_eq!(
            rep.get(&format!("post.{kind}_allocs_per_1000")),
            "0",
            "heap allocations per 1000 posts ({kind})\n{}",
            rep.context()
        );
    }
    assert_eq!(rep.get("aio.cq_completions"), "96");
    assert_eq!(rep.get("aio.connections"), "4");
    assert!(rep.num("cq_overflow.cq_full") > 0, "{}", rep.context());
    // Two processes at once, each in its own context.
    assert_eq!(rep.get("parallel.first.status"), "0", "{}", rep.context());
    assert_eq!(rep.get("parallel.second.status"), "0", "{}", rep.context());
}

/// A ring buffer whose consumer sleeps until the next record is written, woken by
/// tripwires (`qpip-tripwire`): two iWARP QPs over the device's loopback, the producer
/// RDMA-Writing records around the consumer's ring, the consumer blocked on the
/// tripwires' CQ descriptor, each slot's tripwire armed before the producer may write the
/// slot. Every record must bring exactly one event, in order, naming its slot, tripwire,
/// the 8 bytes at the slot's end and their address, and every byte of every record is
/// checked; a closing record's event must follow the last one directly (an event that came
/// twice would come before it) and nothing after it. A tripwire on the whole ring that is
/// never armed, made on a used arm word, must never fire. Eight slots and 1000 records of
/// 256 bytes, then one slot (the consumer waits for each record) and 300 records of 1024.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn a_ring_buffer_consumer_woken_by_tripwires() {
    let out = common::boot(&common::vm(
        r#"
qpip-tripwire --records 1000 --slots 8 --size 256 --port 7400 --name ring8; kv ring8.status $?
qpip-tripwire --records 300 --slots 1 --size 1024 --port 7401 --name ring1; kv ring1.status $?
"#,
    ));
    let rep = Report::succeeded(&out);
    rep.statuses_zero("qpip-tripwire", &["ring8", "ring1"]);
    rep.checks_pass(&["ring8.ring", "ring1.ring"]);
    for (tag, records, size) in [("ring8", 1000, 256), ("ring1", 300, 1024)] {
        // The records and the closing one: one event each.
        assert_eq!(
            rep.num(&format!("{tag}.events")),
            records + 1,
            "{}",
            rep.context()
        );
        assert_eq!(
            rep.num(&format!("{tag}.bytes_checked")),
            (records + 1) * size,
            "{}",
            rep.context()
        );
        eprintln!(
            "{tag}: {records} records, the consumer slept {} times",
            rep.get(&format!("{tag}.sleeps"))
        );
    }
    // With one slot the producer writes only after the consumer took the last record, so
    // the consumer finds the CQ empty and sleeps on its descriptor (each time, in practice):
    // the blocking path ran.
    assert!(rep.num("ring1.sleeps") > 0, "{}", rep.context());
}

/// The C API's examples (`guest-lib/capi/examples/`, built statically against
/// `libqpip.a` into the guest image as `qpip-c-pingpong` and `qpip-c-iwarp`) on the
/// device: UDP and TCP ping-pongs and the error codes of misused calls; then iWARP from
/// C — MPA setup with private data both ways and CRCs, an RDMA Write that fires an armed
/// tripwire once, an RDMA Read, and the error codes of misused iWARP and tripwire calls.
/// The unit tests run the same programs on the software provider, which has no iWARP.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_c_examples_on_the_device() {
    let out = common::boot(&common::vm(
        r#"
qpip-c-pingpong 200 7410 > /tmp/pp 2>&1; kv pingpong.status $?
kv pingpong.out "$(tr '\n' '|' < /tmp/pp)"
qpip-c-iwarp 7411 > /tmp/iw 2>&1; kv iwarp.status $?
kv iwarp.out "$(tr '\n' '|' < /tmp/iw)"
"#,
    ));
    let rep = Report::succeeded(&out);
    rep.statuses_zero("the C examples", &["pingpong", "iwarp"]);
    for (tag, lines) in [
        (
            "pingpong",
            &[
                "provider device",
                "udp ping-pong: 200 round trips ok",
                "tcp ping-pong: 200 round trips ok",
                "errors ok",
                "pingpong: all ok",
            ][..],
        ),
        (
            "iwarp",
            &[
                "provider device",
                "iwarp misuse: error codes ok",
                "iwarp setup: MPA revision 2",
                "iwarp tripwire: one event per arm ok",
                "iwarp rdma: write and read ok",
                "iwarp: all ok",
            ][..],
        ),
    ] {
        let said = rep.get(&format!("{tag}.out"));
        for line in lines {
            assert!(
                said.contains(line),
                "qpip-c-{tag} did not say {line:?}\n{}",
                rep.context()
            );
        }
    }
}
