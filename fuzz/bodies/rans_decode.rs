// The body of fuzz target `rans_decode`, shared by fuzz/fuzz_targets/rans_decode.rs (via include!) and the
// stable corpus replay in tests/tests/fuzz_regressions.rs, so the two cannot drift apart.
use tern_format::neuzip::{self, Plan};
use tern_format::FloatType;

/// One fuzz input.
pub fn run(data: &[u8]) {
    let full = neuzip::decode(data);
    let _ = neuzip::stats(data);
    let reference = neuzip::decode_exponents_reference(data);
    if let Ok(plan) = Plan::parse(data) {
        let rows = plan.rows();
        let h = data
            .iter()
            .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
        let first = if rows == 0 { 0 } else { h % rows };
        let n = if rows == 0 {
            0
        } else {
            (h >> 32) % (rows - first + 1)
        };
        let part = neuzip::decode_rows(data, first, n);
        let _ = neuzip::decode_rows(data, first, u64::MAX);
        let _ = neuzip::decode_rows(data, rows, 1);
        if let Ok(all) = &full {
            let size = plan.dtype.size();
            assert_eq!(all.len() as u64, plan.n_elements * size as u64);
            let rb = plan.row_len as usize * size;
            let part = part.expect("decode_rows fails on a blob that decodes");
            assert_eq!(
                part[..],
                all[first as usize * rb..(first + n) as usize * rb]
            );
            assert!(
                reference.is_ok(),
                "reference decoder rejects a blob that decodes"
            );
        }
    } else {
        assert!(full.is_err());
    }
    // Encoder round trip on the raw bytes as 16-bit floats (lossless must be bit-exact).
    let even = &data[..data.len() & !1];
    for dtype in [FloatType::Bf16, FloatType::F16] {
        let full_bits = tern_format::encoding::full_mantissa_bits(dtype);
        let blob = neuzip::encode(dtype, full_bits, even, even.len() / 2).expect("encode");
        assert_eq!(neuzip::decode(&blob).expect("decode own blob"), even);
        // Layout 2 (groups of 4 over short lanes), rows of an odd length where possible.
        let n = even.len() / 2;
        let row = if n % 3 == 0 && n > 0 { 3 } else { n.max(1) };
        let blob = neuzip::encode_v2(dtype, full_bits, even, row).expect("encode v2");
        assert_eq!(neuzip::decode(&blob).expect("decode own v2 blob"), even);
        assert_eq!(
            neuzip::decode_exponents_reference(&blob).expect("v2 reference").len(),
            n
        );
    }
}
