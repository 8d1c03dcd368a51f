//! Fuzz the GGUF parser: parse, read every metadata value through the typed getters, read every
//! tensor's bytes and decode the ones tern supports. Nothing may panic; errors are fine.
//! Seeds and minimized crashes: fuzz/regressions/gguf_parse/.
#![no_main]

include!("../bodies/gguf_parse.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
