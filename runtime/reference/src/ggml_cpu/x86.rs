use std::arch::x86_64::*;

use super::ActBlock;
use crate::ggml_dot::{f16_at, Q4_1_BYTES, Q8_0_BYTES};

#[target_feature(enable = "avx2,fma,f16c")]
fn hsum8(x: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// [`super::dot_q4_1_q8_1`] on 20-byte Q4_1 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_1_q8_1(blocks: &[u8], act: &[ActBlock]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    let mask = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for (b, a) in blocks.chunks_exact(Q4_1_BYTES).zip(act) {
        let Some(qs) = b.get(4..Q4_1_BYTES) else {
            continue;
        };
        summs = f16_at(b, 2).mul_add(a.s, summs);
        let dd = f16_at(b, 0) * a.d;
        // SAFETY: `qs` holds 16 bytes and `a.qs` 32 bytes; unaligned loads.
        let (raw, qy) = unsafe {
            (
                _mm_loadu_si128(qs.as_ptr().cast()),
                _mm256_loadu_si256(a.qs.as_ptr().cast()),
            )
        };
        let lo = _mm_and_si128(raw, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
        let qx = _mm256_set_m128i(hi, lo);
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qx, qy), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(p), acc);
    }
    hsum8(acc) + summs
}

/// [`super::dot_q8_0_q8_0_tinyblas`] on 34-byte Q8_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q8_0_q8_0(blocks: &[u8], act: &[ActBlock]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let ones = _mm256_set1_epi16(1);
    for (b, a) in blocks.chunks_exact(Q8_0_BYTES).zip(act) {
        let Some(qs) = b.get(2..Q8_0_BYTES) else {
            continue;
        };
        let dd = f16_at(b, 0) * a.d;
        // SAFETY: `qs` and `a.qs` hold 32 bytes each; unaligned loads.
        let (w, y) = unsafe {
            (
                _mm256_loadu_si256(qs.as_ptr().cast()),
                _mm256_loadu_si256(a.qs.as_ptr().cast()),
            )
        };
        let p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w)),
            ones,
        );
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(p), acc);
    }
    hsum8(acc)
}
