//! Fuzz target `chat_template` (issue 29): see fuzz/bodies/chat_template.rs for what the input means and what must
//! hold. Seeds and minimized findings: fuzz/regressions/chat_template/ (replayed on stable by
//! `tests/tests/fuzz_regressions.rs`). Run with `-rss_limit_mb` and `-timeout` (scripts/test.sh
//! does) so that an OOM or a hang is a finding.
#![no_main]

include!("../bodies/chat_template.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
