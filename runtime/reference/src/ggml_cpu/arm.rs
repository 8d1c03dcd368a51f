use std::arch::aarch64::*;

use tern_format::ggml::BlockType;

use super::ActBlock;
use crate::ggml_dot::f16_at;
use crate::simd::neon::{dot_i8_neon, sdot};

/// One block's 32 weights as two vectors of 16 (elements 0..16 and 16..32) as the plain code
/// unpacks them: Q8_0 as stored, Q4_1 the nibbles (low nibbles first), Q4_0 the nibbles − 8.
#[inline]
#[target_feature(enable = "neon")]
fn weights(bt: BlockType, b: &[u8]) -> Option<(int8x16_t, int8x16_t)> {
    match bt {
        BlockType::Q8_0 => {
            let qs = b.get(2..34)?;
            // SAFETY: `qs` holds 32 bytes; unaligned loads.
            Some(unsafe {
                (
                    vld1q_s8(qs.as_ptr().cast()),
                    vld1q_s8(qs.as_ptr().add(16).cast()),
                )
            })
        }
        BlockType::Q4_0 | BlockType::Q4_1 => {
            let off = if bt == BlockType::Q4_1 { 4 } else { 2 };
            let qs = b.get(off..off + 16)?;
            // SAFETY: `qs` holds 16 bytes; unaligned load.
            let raw = unsafe { vld1q_u8(qs.as_ptr()) };
            let lo = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0f)));
            let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
            Some(if bt == BlockType::Q4_0 {
                (vsubq_s8(lo, vdupq_n_s8(8)), vsubq_s8(hi, vdupq_n_s8(8)))
            } else {
                (lo, hi)
            })
        }
        _ => None,
    }
}

/// The block types of the kernels, as const parameters (one monomorphized copy per type, its
/// sizes and branches folded).
const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q4_1: u8 = 2;

/// The block dot of one row (block type `BT`: [`Q8_0`], [`Q4_0`] or [`Q4_1`]) with `dot`
/// giving four lane sums of 16 weights.
#[inline]
#[target_feature(enable = "neon")]
fn dot_with<const BT: u8>(
    blocks: &[u8],
    act: &[ActBlock],
    dot: impl Fn(int8x16_t, int8x16_t) -> int32x4_t,
) -> f32 {
    let bt = match BT {
        Q8_0 => BlockType::Q8_0,
        Q4_0 => BlockType::Q4_0,
        _ => BlockType::Q4_1,
    };
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut summs = 0.0f32;
    for (b, a) in blocks.chunks_exact(bt.block_bytes()).zip(act) {
        let Some(w) = weights(bt, b) else {
            continue;
        };
        if bt == BlockType::Q4_1 {
            summs = f16_at(b, 2).mul_add(a.s, summs);
        }
        let dd = vdupq_n_f32(f16_at(b, 0) * a.d);
        // SAFETY: `a.qs` holds 32 bytes; unaligned loads.
        let y = unsafe { [vld1q_s8(a.qs.as_ptr()), vld1q_s8(a.qs.as_ptr().add(16))] };
        for ((s, w), y) in acc.iter_mut().zip([w.0, w.1]).zip(y) {
            // fma(dd, lane, acc) lane by lane, as the plain code
            *s = vfmaq_f32(*s, dd, vcvtq_f32_s32(dot(w, y)));
        }
    }
    let mut lanes = [0.0f32; 8];
    for (l, s) in lanes.chunks_exact_mut(4).zip(acc) {
        // SAFETY: `l` holds 4 floats; unaligned store.
        unsafe { vst1q_f32(l.as_mut_ptr(), s) };
    }
    let h = super::hsum8(&lanes);
    if bt == BlockType::Q4_1 {
        h + summs
    } else {
        h
    }
}

/// With `sdot` (the CPU must have the dotprod feature). `bt` is Q8_0, Q4_0 or Q4_1 (the
/// matrices that keep blocks); any other type is taken as Q4_1.
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn dot_dotprod(bt: BlockType, blocks: &[u8], act: &[ActBlock]) -> f32 {
    let dot = |w, y| sdot(vdupq_n_s32(0), w, y);
    match bt {
        BlockType::Q8_0 => dot_with::<Q8_0>(blocks, act, dot),
        BlockType::Q4_0 => dot_with::<Q4_0>(blocks, act, dot),
        _ => dot_with::<Q4_1>(blocks, act, dot),
    }
}

/// With widening multiplies (base NEON: every AArch64 CPU); `bt` as for [`dot_dotprod`].
#[target_feature(enable = "neon")]
pub(crate) fn dot_neon(bt: BlockType, blocks: &[u8], act: &[ActBlock]) -> f32 {
    let dot = |w, y| dot_i8_neon(w, y);
    match bt {
        BlockType::Q8_0 => dot_with::<Q8_0>(blocks, act, dot),
        BlockType::Q4_0 => dot_with::<Q4_0>(blocks, act, dot),
        _ => dot_with::<Q4_1>(blocks, act, dot),
    }
}
