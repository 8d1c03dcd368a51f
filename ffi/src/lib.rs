//! ffi
