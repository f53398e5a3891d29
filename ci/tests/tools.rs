//! VM tests of the guest tools on the device: `qpip-cat` over TCP (stream and message
//! framing) and UDP through the device's own address, bytes compared by SHA-256, and
//! `qpip-perf` latency and bandwidth over QPs with its JSON checked.
//!
//! Like the other VM tests they boot a guest, so they are ignored by a plain `cargo test`
//! and run with `-- --ignored`. The guest reports `@key=value` lines; the assertions are
//! made here, so a failure shows the guest's whole report.

mod common;

use common::Report;

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qpip_cat_and_qpip_perf_on_the_device() {
    let mut spec = common::vm(
        r#"
# The device's own global address if it has one (the lab gives fd51:5050::1:N), else
# its loopback.
me=$(grep -v '^fe80' /sys/class/qpip/qpip0/addresses | head -n1 | cut -d/ -f1)
[ -n "$me" ] || me=::1
kv addr "$me"
head -c 300000 /dev/urandom > /tmp/in
kv in.sha "$(sha256sum < /tmp/in | cut -d' ' -f1)"
# TCP, both framings: the listener in the background (stdin at its end at once).
for f in stream message; do
  qpip-cat --$f -w 60 -l 7000 > /tmp/out.$f &
  l=$!
  sleep 1
  qpip-cat --$f -w 60 "$me" 7000 < /tmp/in; kv cat.$f.client $?
  wait $l; kv cat.$f.server $?
  kv cat.$f.sha "$(sha256sum < /tmp/out.$f | cut -d' ' -f1)"
done
# UDP: eight datagrams of 8192 bytes at most, within the listener's posted buffers.
head -c 60000 /tmp/in > /tmp/uin
qpip-cat -u -w 3 -l 7001 > /tmp/uout &
l=$!
sleep 1
qpip-cat -u "$me" 7001 < /tmp/uin; kv cat.udp.client $?
wait $l; kv cat.udp.server $?
kv cat.udp.ok "$(cmp -s /tmp/uin /tmp/uout && echo yes || echo no)"
qpip-cat "$me" 1 < /dev/null 2> /tmp/err; kv cat.refused $?
kv cat.refused.msg "$(cat /tmp/err)"
# qpip-perf, QPs on the device, server in the background.
qpip-perf -s --port 5201 > /tmp/perf-server 2>&1 &
s=$!
sleep 1
qpip-perf "$me" --port 5201 --iters 200 --bytes 200000 --sizes 1024,8192 --json > /tmp/perf.json; kv perf.status $?
kill $s
kv perf.json "$(cat /tmp/perf.json)"
"#,
    );
    // Under TCG on a shared machine the transfers and the perf runs take minutes.
    spec.timeout = std::time::Duration::from_secs(600);
    let out = common::boot(&spec);
    let rep = Report::succeeded(&out);
    let addr = rep.get("addr");
    assert!(
        addr == "::1" || addr.starts_with("fd51:5050::1:"),
        "{}",
        rep.context()
    );
    let sha = rep.get("in.sha");
    for f in ["stream", "message"] {
        assert_eq!(
            rep.get(&format!("cat.{f}.client")),
            "0",
            "{f}\n{}",
            rep.context()
        );
        assert_eq!(
            rep.get(&format!("cat.{f}.server")),
            "0",
            "{f}\n{}",
            rep.context()
        );
        assert_eq!(
            rep.get(&format!("cat.{f}.sha")),
            sha,
            "{f}: bytes changed\n{}",
            rep.context()
        );
    }
    assert_eq!(rep.get("cat.udp.client"), "0", "{}", rep.context());
    assert_eq!(rep.get("cat.udp.server"), "0", "{}", rep.context());
    assert_eq!(rep.get("cat.udp.ok"), "yes", "{}", rep.context());
    assert_eq!(rep.get("cat.refused"), "1", "{}", rep.context());
    assert!(
        rep.get("cat.refused.msg")
            .starts_with("qpip-cat: connect to"),
        "{}",
        rep.context()
    );
    assert_eq!(rep.get("perf.status"), "0", "{}", rep.context());
    let json = rep.get("perf.json");
    assert!(json.contains("\"net\":\"qpip\""), "{json}");
    for row in [
        "\"test\":\"latency\",\"transport\":\"udp\"",
        "\"test\":\"latency\",\"transport\":\"tcp\"",
    ] {
        assert!(json.contains(row), "no {row} in {json}");
    }
    assert_eq!(json.matches("\"test\":\"bandwidth\"").count(), 4, "{json}");
    // Only the four bandwidth rows have no round-trip times.
    assert_eq!(
        json.matches("\"p50\":null").count(),
        4,
        "a latency without round trips: {json}"
    );
}
