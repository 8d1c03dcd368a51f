// The body of fuzz target `delta_decode`, shared by fuzz/fuzz_targets/delta_decode.rs (via
// include!) and the stable corpus replay in tests/tests/fuzz_regressions.rs.

/// Decode `data` as a delta chunk or a whole `.ternd` file; errors are fine, panics are not.
pub fn run(data: &[u8]) {
    tern_format::delta::fuzz_input(data);
}
