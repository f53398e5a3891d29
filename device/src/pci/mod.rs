//! The PCI face of the function: configuration space (with the MSI-X capability) and the
//! BAR/region map that QEMU's vfio-user client discovers. Register semantics behind the
//! BARs live in [`crate::function`]; this module only describes and routes.

pub mod config;
