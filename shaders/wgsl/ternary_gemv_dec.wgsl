// The decode ternary GEMV (issue 15): ternary_gemv.wgsl's contract and bits for 2-bit codes
// whose rows start 16-byte aligned (words_per_row % 4 == 0) and scale groups that are whole
// 64-column chunks (group 0, or a multiple of 64); the launcher sends every other shape to
// ternary_gemv.wgsl. y[t][r] = (Σ_g scale_{r,g} · Σ_{c∈g} trit_{r,c} · q_t[c]) / s_t: integer
// inner sums (i32, exact and order-free), then f32 in the reference's order (groups in
// increasing order from 0.0, one correctly rounded division by s_t), so the same bits as
// ternary_gemv.wgsl and tern_reference's `TernaryWeights::dot_int`.
//
// Why a second kernel: a decode GEMV is one pass over the weight, and on a big GPU its speed is
// the bytes in flight. ternary_gemv.wgsl gives a lane one u32 (16 codes) per trip and reads the
// activation words one at a time; here a lane takes 64 codes per 16-byte load, four loads in
// flight per trip, with the 64 activations as vec4 loads (cache hits: every row of the
// workgroup reads the same row), and turns a code byte into 4 trit bytes with 5 integer ops
// (code + 0x7f has no carry; ^ 0x80 maps 0, 1, 2 to −1, 0, 1) for one packed dot each.
// Workgroups of 64 invocations, 8 per row: 8 rows per workgroup, so even a 2560-row matrix
// spreads over 320 workgroups.
//
// Override constants:
//   SCALE_TYPE  0 = f32, 1 = f16, 2 = bf16
//   ACT4        0 = INT8 activations (4 per u32), 1 = INT4 (8 per u32, act_quant_a48.wgsl's
//               packing: word j holds columns 8j .. 8j + 3 in its low nibbles, 8j + 4 .. 8j + 7
//               in its high nibbles), sign-extended to int8 bytes in registers
//   DOT         1 = `dot4I8Packed`, 0 = the plain byte-by-byte sum (same integers)
//
// Bindings: w: one part of the weight as vec4 words: [rows_part][words_per_row] u32 codes, then
// the part's scales (at word `scale_word_offset`; group 0: one scale (two for gate/up pairs),
// else [rows_part][groups_per_row]); xq: [n_tokens][act_stride] u32 (act_stride a multiple of 4,
// as every quantizer writes it); xs: [n_tokens] f32 multipliers; y: [n_tokens][out_stride] f32.
// `p.mode` bits 2..3 and 5: ternary_gemv.wgsl's epilogues (the shared ternary_epilogue.wgsl).

// #import common
// #import ternary_epilogue
// #import ternary_dec_common
// #import ternary_params
// #import packed_dot
// #import int4_act

override SCALE_TYPE: u32 = 0u;
override ACT4: u32 = 0u;
override DOT: u32 = 1u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 64u;
const TPR: u32 = 8u;
const RPW: u32 = 8u; // WG / TPR
// Per-row, per-group integer sums: RPW · groups_per_row ≤ GSUM (checked by the launcher).
const GSUM: u32 = 1024u;
var<workgroup> gsum: array<atomic<i32>, GSUM>;
// The pair epilogue: each row's result, read by its pair partner.
var<workgroup> pres: array<f32, RPW>;

// Σ trit · act of code word cw with its 16 INT4 activations: lo holds columns 0 .. 8 of the
// word, hi 8 .. 16 (each: 4 low nibbles, then 4 high nibbles).
fn word4(cw: u32, lo: u32, hi: u32) -> i32 {
    return dot4(trits(cw, 0u), sext4_or(lo & 0x0f0f0f0fu))
        + dot4(trits(cw, 1u), sext4_or((lo >> 4u) & 0x0f0f0f0fu))
        + dot4(trits(cw, 2u), sext4_or(hi & 0x0f0f0f0fu))
        + dot4(trits(cw, 3u), sext4_or((hi >> 4u) & 0x0f0f0f0fu));
}

// Σ trit · act over the 64 columns of chunk u (code words 4u .. 4u + 3, value v) of the row,
// with the token's activations starting at vec4 `abase`. Columns past `cols` have zero
// activations (every quantizer pads its row with zeros), so no mask is needed. The sum is
// exact, so its order is free.
fn chunk_dot(v: vec4<u32>, abase: u32, u: u32) -> i32 {
    if (ACT4 == 1u) {
        // 64 INT4 activations: 8 words, 2 vec4 loads
        let a0 = xq[abase + 2u * u];
        let a1 = xq[abase + 2u * u + 1u];
        return word4(v.x, a0.x, a0.y) + word4(v.y, a0.z, a0.w) + word4(v.z, a1.x, a1.y)
            + word4(v.w, a1.z, a1.w);
    }
    // 64 INT8 activations: 16 words, 4 vec4 loads; code word k pairs with vec4 k
    let b = abase + 4u * u;
    return word8(v.x, xq[b]) + word8(v.y, xq[b + 1u]) + word8(v.z, xq[b + 2u])
        + word8(v.w, xq[b + 3u]);
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * RPW + lrow;
    let tok = wg.y;
    let gpr = p.groups_per_row;
    for (var i = lid; i < RPW * gpr; i = i + WG) {
        atomicStore(&gsum[i], 0);
    }
    workgroupBarrier();
    let live = row < p.rows && tok < p.n_tokens;
    if (live) {
        let nv = p.words_per_row >> 2u;
        let vbase = row * nv;
        // vec4 units of the token's activations (act_stride is a multiple of 4 words)
        let abase = tok * (p.act_stride >> 2u);
        var acc = 0i;
        var cur = 0u; // group that acc belongs to
        // Four chunks per trip, loaded before any is used (indices clamped into the row so the
        // loads are unconditional; a chunk past the row adds nothing): four 16-byte loads in
        // flight per lane, most rows take one or two trips.
        for (var u = lane; u < nv; u = u + 4u * TPR) {
            let u1 = u + TPR;
            let u2 = u + 2u * TPR;
            let u3 = u + 3u * TPR;
            let last = nv - 1u;
            let v0 = w[vbase + u];
            let v1 = w[vbase + min(u1, last)];
            let v2 = w[vbase + min(u2, last)];
            let v3 = w[vbase + min(u3, last)];
            let d0 = chunk_dot(v0, abase, u);
            let d1 = chunk_dot(v1, abase, min(u1, last));
            let d2 = chunk_dot(v2, abase, min(u2, last));
            let d3 = chunk_dot(v3, abase, min(u3, last));
            take4(vec4<i32>(d0, d1, d2, d3), u, nv, lrow, &acc, &cur);
        }
        atomicAdd(&gsum[lrow * gpr + cur], acc);
    }
    workgroupBarrier();
    // The row's lanes turn the group sums into products acc_g · scale_g in parallel, stored back
    // as f32 bits; then lane 0 adds them in the reference's order: sum = 0.0, then + product_g.
    if (live) {
        for (var g = lane; g < gpr; g = g + TPR) {
            let si = select(row * gpr + g, pair_scale(row), p.group == 0u);
            let prod = f32(atomicLoad(&gsum[lrow * gpr + g])) * scale_at(si);
            atomicStore(&gsum[lrow * gpr + g], bitcast<i32>(prod));
        }
    }
    workgroupBarrier();
    let first = lane == 0u && live;
    var res = 0.0;
    if (first) {
        var sum = 0.0;
        for (var g = 0u; g < gpr; g = g + 1u) {
            sum = sum + bitcast<f32>(atomicLoad(&gsum[lrow * gpr + g]));
        }
        res = div_rn(sum, xs[tok]);
        pres[lrow] = res;
    }
    if (((p.mode >> 5u) & 1u) == 1u) {
        workgroupBarrier();
    }
    if (first) {
        epilogue((p.mode >> 2u) & 3u, row, tok, res, lrow);
    }
}
