//! # The `.tern` packed model format, version 1
//!
//! (Layout specification: see the numbered list below; filled in with the container code.)

pub mod encoding;
pub mod error;
pub mod ggml;
pub mod meta;
pub mod neuzip;
pub mod ternary;

pub use encoding::{Encoding, FloatType, TernaryLayout};
pub use error::{FormatError, Result};
pub use meta::*;

/// Required-feature bit: some tensor uses NeuZip.
pub const FEATURE_NEUZIP: u64 = 1 << 0;
/// Required-feature bit: some tensor uses the 2-bit ternary layout.
pub const FEATURE_TERNARY_2BIT: u64 = 1 << 1;
/// Required-feature bit: some tensor uses the base-3 ternary layout.
pub const FEATURE_TERNARY_BASE3: u64 = 1 << 2;
