//! The control path of qpipd, as QEMU and a guest driver see it: its command line, the PCI
//! function over vfio-user (enumeration, BARs, registers, resets, MSI-X, guest memory maps,
//! the socket), and the admin queue end to end.

use qpip_testkit as support;

mod admin;
mod cli;
mod function;
