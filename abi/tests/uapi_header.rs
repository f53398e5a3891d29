//! The uapi header `guest-driver/include/uapi/qpip.h` (ioctls, their arguments, events) is
//! generated from `src/uapi.rs` alone. This test regenerates it and fails if the checked-in
//! copy differs; `QPIP_BLESS=1` rewrites it instead.
//!
//! cbindgen writes fixed-width types as `uint32_t` and friends; a header for both the kernel
//! and user space uses the `__u32` family of `<linux/types.h>`, so those names are replaced.

mod cbindgen_header;

/// cbindgen's spelling and the uapi spelling of each fixed-width type.
const UAPI_TYPES: [(&str, &str); 8] = [
    ("uint8_t", "__u8"),
    ("uint16_t", "__u16"),
    ("uint32_t", "__u32"),
    ("uint64_t", "__u64"),
    ("int8_t", "__s8"),
    ("int16_t", "__s16"),
    ("int32_t", "__s32"),
    ("int64_t", "__s64"),
];

fn generate() -> String {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/uapi.rs");
    let mut text =
        cbindgen_header::generate(cbindgen::Builder::new().with_src(src), "cbindgen-uapi.toml");
    for (c, uapi) in UAPI_TYPES {
        // Whole words only: "uint8_t" is inside no other name, but be exact anyway.
        text = replace_word(&text, c, uapi);
    }
    text
}

fn replace_word(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        let is_word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..i]);
        out.push_str(if is_word(before) || is_word(after) {
            from
        } else {
            to
        });
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

#[test]
fn checked_in_uapi_header_is_current() {
    let generated = generate();
    assert!(
        !generated.contains("int8_t") || generated.contains("__s8") || generated.contains("__u8"),
        "fixed-width C types left in the uapi header"
    );
    cbindgen_header::check_or_bless("../guest-driver/include/uapi/qpip.h", &generated);
}

/// Every ioctl number and structure of the uapi is in the header, spelled as the driver uses
/// it, so a missing `include` entry in cbindgen-uapi.toml cannot go unnoticed.
#[test]
fn uapi_header_has_every_ioctl_and_structure() {
    let h = generate();
    for name in [
        "QPIP_IOCTL_QUERY_DEVICE",
        "QPIP_IOCTL_CREATE_CQ",
        "QPIP_IOCTL_DESTROY_CQ",
        "QPIP_IOCTL_CREATE_QP",
        "QPIP_IOCTL_DESTROY_QP",
        "QPIP_IOCTL_REG_MR",
        "QPIP_IOCTL_DEREG_MR",
        "QPIP_IOCTL_BIND",
        "QPIP_IOCTL_LISTEN",
        "QPIP_IOCTL_DESTROY_LISTENER",
        "QPIP_IOCTL_ACCEPT",
        "QPIP_IOCTL_CONNECT",
        "QPIP_IOCTL_CLOSE",
        "QPIP_IOCTL_QUERY_STATS",
        "QPIP_IOCTL_ADD_ADDR",
        "QPIP_IOCTL_DEL_ADDR",
        "QPIP_IOCTL_SET_MAC",
        "QPIP_IOCTL_QUERY_CONN",
        "QPIP_IOCTL_CREATE_TRIPWIRE",
        "QPIP_IOCTL_DESTROY_TRIPWIRE",
        "QPIP_EVENT_SIZE",
        "QPIP_UAPI_VERSION",
    ] {
        assert!(h.contains(&format!("#define {name} ")), "{name} missing");
    }
    for s in [
        "qpip_query_device",
        "qpip_create_cq",
        "qpip_handle",
        "qpip_create_qp",
        "qpip_reg_mr",
        "qpip_endpoint",
        "qpip_bind",
        "qpip_listen",
        "qpip_accept",
        "qpip_connect",
        "qpip_iwarp_conn",
        "qpip_query_conn",
        "qpip_create_tripwire",
        "qpip_close",
        "qpip_query_stats",
        "qpip_addr",
        "qpip_set_mac",
        "qpip_event",
    ] {
        assert!(h.contains(&format!("struct {s} {{")), "struct {s} missing");
    }
    assert!(!h.contains("uint32_t") && !h.contains("iowr"), "{h}");
}
