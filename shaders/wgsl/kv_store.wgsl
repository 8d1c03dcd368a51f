// KV-cache store in every format of tern_format::kv (the spec: math, packing, byte accounting).
// The batch's rows src[t] (t < n_tokens, keys after RoPE) go to positions p0 + t, p0 from the
// step buffer the host rewrites before each submit (one recorded plan serves every position);
// positions past n_ctx are skipped (the host checks first).
//
// One layer's keys (or values) are one array<u32> `cache` (one binding), in sections:
//   codes  [0, par): position p's row of codes at code_base(p), `wpr` words (a3: position 0 has
//          its own 4-bit row of `wpr0` words first); f32: the raw bits, f16: pairs of halves.
//   params [par, win): absmax: the f16 scale of every (position, kv head), two per word
//          (entry p·heads + h); rotated (q4r, q3r, q2r): the (scale, min) f16 pair of every
//          (position, kv head) at par + p·heads + h (scale low, min high); KIVI keys: (scale, min) f16 pairs per (group of G positions,
//          channel) at par + (p / G)·row + c; KIVI values: per (position, group of G channels)
//          at par + p·ngroups + c / G (scale in the low half, min in the high half).
//   window [win, ..): KIVI only, the f16 full-precision window, a ring of min(R, n_ctx) rows
//          (position p at row p % R): keys and values at positions ≥ Q(n) = R·⌊n/R⌋.
//
// STAGE 6 (q8, a4, a3; before stage 0, its own dispatch): the scale words the batch touches (the
//   f16 scale of each (position, kv head), absmax over the head's head_dim values reduced by 32
//   invocations; read-modify-write of the halves outside the batch: a word may be shared with
//   another position) — kv_quant.wgsl's stage_scales.
// STAGE 7 (q4r, q3r, q2r; its own dispatch, a workgroup per (position, unit of kv heads)): each
//   head rotated, its (scale, min) and codes — kv_quant.wgsl's stage_rot.
// STAGE 0 (f32, f16, q8, a4, a3): invocation (t, w) writes word w of position p0 + t's codes
//   (absmax: with each kv head's scale as stage 6 stored it).
// KIVI quantizes keys and values a block of R positions at a time, when the block fills: the
// blocks of positions [Q(p0), Q(n)) (n = p0 + n_tokens).
// STAGE 1 (KIVI keys): invocation (group, w) computes the channels of word w over the group's G
//   positions (min/max, f16 scale and min), writes their params and the group's G code words w.
// STAGE 2 (KIVI values): invocation (position, w) computes word w (each channel's group's
//   min/max over its G channels; the invocation holding a group's first channel writes its
//   params).
// STAGE 3 (KIVI window): new positions ≥ Q(n) go to their ring row as f16.
// STAGE 4 / 5 (KIVI keys / values, one-token batches): stage 1 / 2, then stage 3 in the same
//   dispatch (a block that fills holds the token, which then has no window row).
// Stages 1 and 2 read positions < p0 from the ring and the others from src rounded to f16 (the
// window's own precision), so a value is quantized from the same f16 whether or not it passed
// through the ring; they run before stage 3 overwrites ring rows.
// Division is correctly rounded (div_rn) and f16 rounding is to nearest even, saturated to
// ±65504 (f16_sat): the codes are the CPU oracle's (tern_reference::kv_codec), bit for bit.
// Bindings: geometry; step; src [n_tokens][row] f32; cache (one layer's keys or values).
// The stages' code is kv_quant.wgsl (shared with rope_kv.wgsl's fused RoPE + store), imported
// to this file by the shaders crate.

// #import common
// #import kv_quant
// #import kv_step
// #import kv_formats

@group(0) @binding(0) var<uniform> g: Geom;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<u32>;

override STAGE: u32 = 0u;

// The accessors kv_quant.wgsl (imported: the stages) reads and writes through.
fn src_at(t: u32, c: u32) -> f32 {
    return src[t * g.row + c];
}

fn cache_ld(i: u32) -> u32 {
    return cache[i];
}

fn cache_st(i: u32, w: u32) {
    cache[i] = w;
}

fn is_key() -> bool {
    return g.is_key != 0u;
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    if (STAGE == 6u) {
        stage_scales(lid, wg.x + wg.y * nwg.x);
        return;
    }
    if (STAGE == 7u) {
        stage_rot(lid, wg.x + wg.y * nwg.x);
        return;
    }
    switch STAGE {
        case 0u: { stage_rows(idx); }
        case 1u: { stage_kivi_keys(idx); }
        case 2u: { stage_kivi_values(idx); }
        // a one-token batch: the blocks that fill, then the window row, in one dispatch
        case 4u, 5u: { stage_kivi_step(idx, STAGE == 4u); }
        default: { stage_window(idx); }
    }
}
