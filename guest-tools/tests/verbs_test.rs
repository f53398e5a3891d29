//! `qpip-verbs-test` on the host with the software provider: its checks hold there too (the
//! same API, the same expectations), so the program itself is tested before it runs in a
//! guest.

#[test]
fn the_device_test_program_passes_on_the_soft_provider() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qpip-verbs-test"))
        .arg("--soft")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "qpip-verbs-test --soft failed:\n{text}"
    );
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("@check.epoll=ok"), "{text}");
    // The tools build with the async adapter, so its checks ran too.
    assert!(text.contains("@check.aio.connections=ok"), "{text}");
}
