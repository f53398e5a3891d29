//! Device discovery: the qpip functions the guest driver has bound, from the attributes it
//! publishes under `/sys/class/qpip/qpipN`, and the names of their character devices
//! (`/dev/qpipN`).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Name of the device class the driver registers (`/sys/class/<CLASS>`).
pub const CLASS: &str = "qpip";

/// Where the character devices appear (devtmpfs).
pub const DEV_DIR: &str = "/dev";

/// The interface version a device reports (its `REG_VERSION` register).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AbiVersion {
    pub major: u16,
    pub minor: u16,
}

impl AbiVersion {
    /// The version this library was built against.
    pub const CURRENT: AbiVersion = AbiVersion {
        major: qpip_abi::ABI_VERSION_MAJOR,
        minor: qpip_abi::ABI_VERSION_MINOR,
    };
}

impl fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One qpip function as the guest driver describes it in sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Class device name, `qpipN`.
    pub name: String,
    /// `N` of `qpipN`.
    pub index: u32,
    /// The device's sysfs directory (`<sysfs>/class/qpip/qpipN`).
    pub sysfs_path: PathBuf,
    /// The character device node (`/dev/qpipN`); not checked for existence here.
    pub dev_path: PathBuf,
    /// PCI address (`0000:00:03.0`), from the `device` link; `None` if the driver did not
    /// link a parent device.
    pub pci_address: Option<String>,
    /// Interface version the device reports.
    pub abi_version: AbiVersion,
    /// Identity register; [`qpip_abi::regs::IDENT_MAGIC`] for a working function.
    pub ident: u32,
    /// Number of doorbell pages (= maximum number of user contexts).
    pub doorbell_pages: u32,
    /// Number of MSI-X vectors the device offers.
    pub msix_vectors: u32,
    /// Resets the device has performed since it started.
    pub reset_count: u64,
}

/// Why discovery failed: which sysfs file, and what was wrong with it.
#[derive(Debug)]
pub enum DiscoveryError {
    /// A file or directory could not be read.
    Io { path: PathBuf, source: io::Error },
    /// A file was read but does not hold what the driver is supposed to write there.
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Io { path, source } => write!(f, "{}: {}", path.display(), source),
            DiscoveryError::Parse {
                path,
                content,
                expected,
            } => {
                write!(
                    f,
                    "{}: expected {}, found {:?}",
                    path.display(),
                    expected,
                    content
                )
            }
        }
    }
}

impl std::error::Error for DiscoveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DiscoveryError::Io { source, .. } => Some(source),
            DiscoveryError::Parse { .. } => None,
        }
    }
}

/// True when the qpip driver is loaded (`<sysfs>/module/qpip` exists). Lets tools tell
/// "driver not loaded" apart from "driver loaded, but no device bound".
pub fn driver_loaded(sysfs_root: &Path) -> bool {
    sysfs_root.join("module").join("qpip").is_dir()
}

/// Lists the qpip devices under `sysfs_root` (normally `/sys`), ordered by index.
///
/// No class directory (driver not loaded) is not an error: the answer is then an empty list.
/// A device whose attributes cannot be read or parsed is an error, because it means the
/// driver and this library disagree about the interface.
pub fn list_devices(sysfs_root: &Path) -> Result<Vec<DeviceInfo>, DiscoveryError> {
    let class_dir = sysfs_root.join("class").join(CLASS);
    let entries = match fs::read_dir(&class_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(DiscoveryError::Io {
                path: class_dir,
                source,
            })
        }
    };
    let mut devices = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DiscoveryError::Io {
            path: class_dir.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only `qpipN`: anything else in the class directory is not a device of ours.
        let Some(index) = name.strip_prefix(CLASS).and_then(parse_index) else {
            continue;
        };
        devices.push(read_device(&entry.path(), name, index)?);
    }
    devices.sort_by_key(|d| d.index);
    Ok(devices)
}

fn parse_index(s: &str) -> Option<u32> {
    // Reject "+1", "01" and the like: the kernel names devices with plain "%u".
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

fn read_device(dir: &Path, name: String, index: u32) -> Result<DeviceInfo, DiscoveryError> {
    let abi_version = {
        let (path, text) = read_attr(dir, "abi_version")?;
        parse_version(&text).ok_or(DiscoveryError::Parse {
            path,
            content: text,
            expected: "MAJOR.MINOR",
        })?
    };
    let ident = read_number(dir, "ident")?;
    let doorbell_pages = read_number(dir, "doorbell_pages")?;
    let msix_vectors = read_number(dir, "msix_vectors")?;
    let reset_count = read_number(dir, "reset_count")?;
    let pci_address = pci_address(dir)?;
    Ok(DeviceInfo {
        dev_path: Path::new(DEV_DIR).join(&name),
        sysfs_path: dir.to_path_buf(),
        name,
        index,
        pci_address,
        abi_version,
        ident,
        doorbell_pages,
        msix_vectors,
        reset_count,
    })
}

/// Reads a sysfs attribute; the trailing newline the kernel adds is removed.
fn read_attr(dir: &Path, attr: &str) -> Result<(PathBuf, String), DiscoveryError> {
    let path = dir.join(attr);
    match fs::read_to_string(&path) {
        Ok(text) => Ok((path, text.trim().to_string())),
        Err(source) => Err(DiscoveryError::Io { path, source }),
    }
}

/// Reads a numeric attribute, decimal or `0x` hexadecimal (`ident` is printed in hex).
fn read_number<T: TryFrom<u64>>(dir: &Path, attr: &str) -> Result<T, DiscoveryError> {
    let (path, text) = read_attr(dir, attr)?;
    parse_number(&text)
        .and_then(|n| T::try_from(n).ok())
        .ok_or(DiscoveryError::Parse {
            path,
            content: text,
            expected: "a number in range",
        })
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        None => None,
    }
}

fn parse_version(s: &str) -> Option<AbiVersion> {
    let (major, minor) = s.split_once('.')?;
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(major) || !all_digits(minor) {
        return None;
    }
    Some(AbiVersion {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

/// The PCI address is the last component of the `device` link, which the driver core
/// points at the parent PCI device (`../../../0000:00:03.0`).
fn pci_address(dir: &Path) -> Result<Option<String>, DiscoveryError> {
    let link = dir.join("device");
    match fs::read_link(&link) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(DiscoveryError::Io { path: link, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A throw-away sysfs tree laid out like the kernel's: the class entry is a link to the
    /// device directory under `devices/`, whose `device` link points at the PCI function.
    struct FakeSysfs {
        root: PathBuf,
    }

    impl FakeSysfs {
        fn new() -> FakeSysfs {
            static N: AtomicU32 = AtomicU32::new(0);
            let root = std::env::temp_dir().join(format!(
                "qpip-sysfs-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("class").join(CLASS)).unwrap();
            FakeSysfs { root }
        }

        /// Adds `qpipN` with the attributes a healthy device has; returns its directory.
        fn add(&self, index: u32, pci: &str) -> PathBuf {
            let pci_dir = self.root.join("devices/pci0000:00").join(pci);
            let dev_dir = pci_dir.join("qpip").join(format!("qpip{index}"));
            fs::create_dir_all(&dev_dir).unwrap();
            for (attr, value) in [
                ("abi_version", "1.0\n"),
                ("ident", "0x50495051\n"),
                ("doorbell_pages", "64\n"),
                ("msix_vectors", "16\n"),
                ("reset_count", "0\n"),
                ("dev", "240:0\n"),
            ] {
                fs::write(dev_dir.join(attr), value).unwrap();
            }
            symlink(format!("../../../{pci}"), dev_dir.join("device")).unwrap();
            symlink(
                &dev_dir,
                self.root
                    .join("class")
                    .join(CLASS)
                    .join(format!("qpip{index}")),
            )
            .unwrap();
            dev_dir
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn no_class_directory_means_no_devices() {
        let sys = FakeSysfs::new();
        fs::remove_dir(sys.root.join("class").join(CLASS)).unwrap();
        assert_eq!(list_devices(&sys.root).unwrap(), vec![]);
        assert!(!driver_loaded(&sys.root));
    }

    #[test]
    fn driver_loaded_looks_at_the_module_directory() {
        let sys = FakeSysfs::new();
        fs::create_dir_all(sys.root.join("module/qpip")).unwrap();
        assert!(driver_loaded(&sys.root));
    }

    #[test]
    fn reads_one_device() {
        let sys = FakeSysfs::new();
        let dir = sys.add(0, "0000:00:03.0");
        fs::write(dir.join("reset_count"), "7\n").unwrap();
        let devs = list_devices(&sys.root).unwrap();
        assert_eq!(devs.len(), 1);
        let d = &devs[0];
        assert_eq!(d.name, "qpip0");
        assert_eq!(d.index, 0);
        assert_eq!(d.dev_path, Path::new("/dev/qpip0"));
        assert_eq!(d.sysfs_path, sys.root.join("class/qpip/qpip0"));
        assert_eq!(d.pci_address.as_deref(), Some("0000:00:03.0"));
        assert_eq!(d.abi_version, AbiVersion { major: 1, minor: 0 });
        assert_eq!(d.abi_version.to_string(), "1.0");
        assert_eq!(d.ident, qpip_abi::regs::IDENT_MAGIC);
        assert_eq!(d.doorbell_pages, 64);
        assert_eq!(d.msix_vectors, 16);
        assert_eq!(d.reset_count, 7);
    }

    #[test]
    fn orders_devices_by_number_and_skips_strangers() {
        let sys = FakeSysfs::new();
        sys.add(10, "0000:00:05.0");
        sys.add(2, "0000:00:04.0");
        sys.add(0, "0000:00:03.0");
        fs::create_dir(sys.root.join("class/qpip/qpipctl")).unwrap();
        fs::create_dir(sys.root.join("class/qpip/qpip01")).unwrap();
        let names: Vec<_> = list_devices(&sys.root)
            .unwrap()
            .into_iter()
            .map(|d| (d.name, d.pci_address))
            .collect();
        assert_eq!(
            names,
            vec![
                ("qpip0".into(), Some("0000:00:03.0".into())),
                ("qpip2".into(), Some("0000:00:04.0".into())),
                ("qpip10".into(), Some("0000:00:05.0".into())),
            ]
        );
    }

    #[test]
    fn missing_device_link_is_no_pci_address() {
        let sys = FakeSysfs::new();
        let dir = sys.add(0, "0000:00:03.0");
        fs::remove_file(dir.join("device")).unwrap();
        assert_eq!(list_devices(&sys.root).unwrap()[0].pci_address, None);
    }

    #[test]
    fn missing_attribute_names_the_file() {
        let sys = FakeSysfs::new();
        let dir = sys.add(0, "0000:00:03.0");
        fs::remove_file(dir.join("msix_vectors")).unwrap();
        let err = list_devices(&sys.root).unwrap_err();
        assert!(matches!(err, DiscoveryError::Io { .. }));
        assert!(err.to_string().contains("qpip0/msix_vectors"), "{err}");
    }

    #[test]
    fn malformed_attributes_are_errors() {
        for (attr, bad) in [
            ("abi_version", "1\n"),
            ("abi_version", "1.x\n"),
            ("ident", "QPIP\n"),
            ("ident", "0x\n"),
            ("doorbell_pages", "-1\n"),
            ("msix_vectors", "4294967296\n"),
            ("reset_count", "\n"),
        ] {
            let sys = FakeSysfs::new();
            let dir = sys.add(0, "0000:00:03.0");
            fs::write(dir.join(attr), bad).unwrap();
            match list_devices(&sys.root) {
                Err(DiscoveryError::Parse { path, .. }) => assert!(path.ends_with(attr)),
                other => panic!("{attr}={bad:?}: expected a parse error, got {other:?}"),
            }
        }
    }

    #[test]
    fn numbers_in_decimal_or_hex() {
        assert_eq!(parse_number("0"), Some(0));
        assert_eq!(parse_number("64"), Some(64));
        assert_eq!(parse_number("0x50495051"), Some(0x5049_5051));
        assert_eq!(parse_number("0X10"), Some(16));
        assert_eq!(parse_number(""), None);
        assert_eq!(parse_number("+1"), None);
        assert_eq!(parse_number("0x-1"), None);
    }

    #[test]
    fn current_version_matches_the_abi_crate() {
        assert_eq!(AbiVersion::CURRENT.major, qpip_abi::ABI_VERSION_MAJOR);
        assert_eq!(AbiVersion::CURRENT.minor, qpip_abi::ABI_VERSION_MINOR);
    }
}
