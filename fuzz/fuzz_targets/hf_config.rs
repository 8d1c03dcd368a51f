//! Fuzz target `hf_config` (issue 29): see fuzz/bodies/hf_config.rs for what the input means and what must
//! hold. Seeds and minimized findings: fuzz/regressions/hf_config/ (replayed on stable by
//! `tests/tests/fuzz_regressions.rs`). Run with `-rss_limit_mb` and `-timeout` (scripts/test.sh
//! does) so that an OOM or a hang is a finding.
#![no_main]

include!("../bodies/hf_config.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
