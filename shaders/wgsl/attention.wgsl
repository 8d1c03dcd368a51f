// Causal grouped-query attention over the KV cache (tern_reference::kernels::attention), split-K
// ("flash decoding") so that a decode step with few heads still fills the GPU.
//
// Query token t sits at position p0 + t (p0 from the step buffer) and attends keys
// 0 ..= p0 + t (n_kv = min(p0 + t + 1, n_ctx) of them) of kv head h / (n_head / n_head_kv); with a
// sliding window (p.window > 0: Gemma 3's local layers) only the last min(n_kv, window) of them,
// the chunks below cut from that range.
// Workgroup (x, t, s): x = kv head · n_hg + head group; a head group is up to 4 query heads
// sharing one kv head (their scores and outputs are the 4 lanes of vec4s), so each key and value
// row is read once for 4 heads. s = split: the keys are cut into n_split chunks of
// max(ceil(n_kv / n_split), MIN_CHUNK) keys; chunk s is [s·chunk, min((s+1)·chunk, n_kv)), empty
// chunks return at once (the chunk length follows p0, so one recorded dispatch serves every
// position, with the splits balanced at any depth).
// A chunk is processed in tiles of 64 keys (online softmax), each in three steps:
//  1. scores: 8 invocations per key, 32 keys at a time, each invocation dotting every 8th dim
//     (so 8 neighbours read 8 consecutive floats of a key row: whole 32-byte sectors) into
//     partial dot products in workgroup memory, summed per key by 64 invocations (× scale);
//  2. the running max is a workgroup atomicMax on order-preserving u32 images of the scores
//     (monotone over the tiles, so it is never reset), 64 invocations store exp(score − max);
//  3. values: invocation i owns dim i % head_dim of the 4 heads and every (256 / head_dim)-th key
//     of the tile (key group i / head_dim; 2 groups at head_dim 128, 4 at 64): consecutive
//     invocations read consecutive floats of a value row. It rescales its output accumulator and
//     Σ exp by exp(old max − new max) and adds the tile.
// 256 invocations (not 128) halve the chain of dependent loads each one waits for in a decode
// step, where latency, not bandwidth, bounds a workgroup.
// The key and value loops issue 8 independent loads before using them (a decode step is a chain
// of memory latencies, and drivers do not always pipeline loads across loop iterations).
// The key groups' accumulators are summed in a fixed order at the end (deterministic).
// n_split = 1: out = acc / Σ. Otherwise the unnormalized (max, Σ, acc[head_dim]) of each
// (token, head, split) go to `out` as partials, merged by attention_combine.wgsl.
// f32 throughout; the order of the sums differs from the reference's (NMSE ~1e-14).
// The cache is read in its stored format (FMT, the layout of kv_store.wgsl and tern_format::kv):
// kget / vget (attention_kv_read.wgsl) dequantize one value in registers (f16 halves, codes × scale
// (+ min), the KIVI window's f16 rows) — no decompressed copy of the cache exists. KIVI's split
// between quantized and full-precision positions is the cache's after this batch's store:
// Q(n) = R·⌊n/R⌋ with n = p0 + n_tokens, for keys and values alike. The rotated formats (q4r,
// q3r, q2r) hold H·k and H·v per kv head: the queries are rotated in `qs` once loaded (rot_qs,
// a few barriers per workgroup), and Hᵀ is applied to each head's accumulator before the output
// or the partials are written (Hᵀ is linear: attention_combine.wgsl merges rotated-back partials
// as any others) — in this kernel, so no extra dispatch or pass over the output. KIVI with WORDS = 1 (the launcher's choice when
// n_split = 1) scores keys a code word at a time and folds the parameters instead (see main).
// Bindings: params; step; q [n_tokens][n_head·head_dim] (MC = 1: then layer a's rows); k_cache, v_cache (one layer's keys and
// values as kv_store.wgsl lays them out); out: [n_tokens][n_head·head_dim], or partials
// [n_tokens][n_head][n_split][head_dim + 2]; geom (the cache layout, kv_store.wgsl's Geom).

// #import common
// #import kv_step
// #import attention_params
// #import kv_formats
// #import attention_kv_read

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<u32>;
@group(0) @binding(4) var<storage, read> vc: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<uniform> g: Geom;

const WG: u32 = 256u;
// Keys per tile.
const TILE: u32 = 64u;
// Invocations per key in the score step, and keys scored at once (WG / LANES).
const LANES: u32 = 8u;
const KPP: u32 = 32u;
// Partial dots of a key are LANES + 1 apart (no bank conflicts when summed).
const PSTRIDE: u32 = 9u;
// Shortest chunk (keys) a split gets (the launcher and attention_combine.wgsl use the same).
const MIN_CHUNK: u32 = 32u;
const GM: u32 = 4u;

var<workgroup> qs: array<vec4<f32>, 256>;
// Partial dots [TILE][PSTRIDE]; at the end, the key groups' accumulators.
var<workgroup> part: array<vec4<f32>, 576>;
var<workgroup> sc: array<vec4<f32>, 64>;
var<workgroup> ex: array<vec4<f32>, 64>;
// Running max of the scores (order-preserving u32 images, atomicMax; monotone over the tiles).
var<workgroup> amax: array<atomic<u32>, 4>;
// KIVI: 1 for the tile's keys whose values are read one by one (vget: the f16 window, a pair's
// pending or retained rows), 0 for those read through the tile's folded parameters.
var<workgroup> spec: array<u32, 64>;

// KIVI codes per u32 word (3-bit: 10, the top 2 bits unused).
fn cpw() -> u32 {
    return select(32u / fmt_bits(), 10u, fmt_bits() == 3u);
}

// KIVI (word path): the factor of position j's quantized key direction for kv head h (its
// MiniCache magnitude, 1 without MiniCache), or -1 when the key is read one channel at a time
// through kget (the f16 window, a first layer's pending rows, a second layer's retained rows).
fn kfactor(j: u32, h: u32) -> f32 {
    if (j >= qend) {
        return -1.0;
    }
    if (MC == 0u) {
        return 1.0;
    }
    let bits = mc_bits(kc[mag_word(j, h)], j, h);
    if (MC == 2u && (bits & 0x8000u) != 0u) {
        return -1.0;
    }
    return f16_bits_to_f32(bits);
}

// The same for values (vget).
fn vfactor(j: u32, h: u32) -> f32 {
    if (j >= qend) {
        return -1.0;
    }
    if (MC == 0u) {
        return 1.0;
    }
    let bits = mc_bits(vc[mag_word(j, h)], j, h);
    if (MC == 2u && (bits & 0x8000u) != 0u) {
        return -1.0;
    }
    return f16_bits_to_f32(bits);
}

// KIVI per-channel path, a quantized key (j < qend) of a layer of its own, head_dim a multiple
// of 64: the partial dot of score lane `lane` over 8-channel blocks lane, lane + LANES, ... of
// the head at channel koff. A block's two code words (8 channels span at most 2 words for 2, 3
// and 4 bits) and its 8 (scale, min) words are loaded together, then dequantized in registers
// (kdir's exact formula); within a block the channels go in an order rotated by the lane, so
// the 8 lanes of a key read 8 different banks of `qs`. 10 loads per 8 channels instead of 16.
fn kq(wa: u32, wb: u32, wia: u32, c: u32, bits: u32, sm: u32) -> f32 {
    let w = select(wa, wb, word_index(c, bits) != wia);
    return f32(code_of(w, c, bits)) * f16_bits_to_f32(sm & 0xffffu) + f16_bits_to_f32(sm >> 16u);
}

fn kivi_key_dot(kj: u32, koff: u32, lane: u32, hd: u32) -> vec4<f32> {
    let bits = fmt_bits();
    let pb = g.par + div_group(kj) * g.row;
    let rb = kj * g.wpr;
    var dot = vec4<f32>(0.0);
    for (var b = lane; b < hd / 8u; b = b + LANES) {
        let c = koff + b * 8u;
        let wia = word_index(c, bits);
        let wa = kc[rb + wia];
        let wb = kc[rb + word_index(c + 7u, bits)];
        let c0 = c + (lane & 7u);
        let c1 = c + ((lane + 1u) & 7u);
        let c2 = c + ((lane + 2u) & 7u);
        let c3 = c + ((lane + 3u) & 7u);
        let c4 = c + ((lane + 4u) & 7u);
        let c5 = c + ((lane + 5u) & 7u);
        let c6 = c + ((lane + 6u) & 7u);
        let c7 = c + ((lane + 7u) & 7u);
        let s0 = kc[pb + c0];
        let s1 = kc[pb + c1];
        let s2 = kc[pb + c2];
        let s3 = kc[pb + c3];
        let s4 = kc[pb + c4];
        let s5 = kc[pb + c5];
        let s6 = kc[pb + c6];
        let s7 = kc[pb + c7];
        dot = dot + qs[c0 - koff] * kq(wa, wb, wia, c0, bits, s0)
            + qs[c1 - koff] * kq(wa, wb, wia, c1, bits, s1)
            + qs[c2 - koff] * kq(wa, wb, wia, c2, bits, s2)
            + qs[c3 - koff] * kq(wa, wb, wia, c3, bits, s3)
            + qs[c4 - koff] * kq(wa, wb, wia, c4, bits, s4)
            + qs[c5 - koff] * kq(wa, wb, wia, c5, bits, s5)
            + qs[c6 - koff] * kq(wa, wb, wia, c6, bits, s6)
            + qs[c7 - koff] * kq(wa, wb, wia, c7, bits, s7);
    }
    return dot;
}

// Formats whose codes of one kv head fill whole u32 words from a word boundary — f16 (2 per
// word), q8 (4), a4 (8), head_dim a multiple of that, a layer of its own (no MiniCache): keys
// are scored a word at a time (one load for 2–8 channels, the absmax scale once per key instead
// of once per channel) and the absmax values through the tile's e · scale (folded once per key
// into `sc`), so a value costs one code load. Same values as kget / vget; the f32 sums group
// differently (within the attention NMSE bound).
fn packed_cpw() -> u32 {
    switch FMT {
        case FMT_F16: { return 2u; }
        case FMT_Q8: { return 4u; }
        default: { return 8u; }
    }
}

fn packed() -> bool {
    return MC == 0u && (FMT == FMT_F16 || FMT == FMT_Q8 || FMT == FMT_A4)
        && p.head_dim % packed_cpw() == 0u;
}

// The word of position j's row where kv head `koff / head_dim`'s channels start.
fn packed_base(j: u32, koff: u32) -> u32 {
    if (FMT == FMT_F16) {
        return (j * g.row + koff) >> 1u;
    }
    return j * g.wpr + koff / packed_cpw();
}

// Σ over the word's channels c .. c + cpw of qs · value (absmax: the signed code, unscaled).
fn word_dot(w: u32, c: u32) -> vec4<f32> {
    if (FMT == FMT_F16) {
        return qs[c] * f16_bits_to_f32(w & 0xffffu) + qs[c + 1u] * f16_bits_to_f32(w >> 16u);
    }
    if (FMT == FMT_Q8) {
        let x = bitcast<i32>(w);
        return qs[c] * f32(extractBits(x, 0u, 8u)) + qs[c + 1u] * f32(extractBits(x, 8u, 8u))
            + qs[c + 2u] * f32(extractBits(x, 16u, 8u)) + qs[c + 3u] * f32(extractBits(x, 24u, 8u));
    }
    // a4: unsigned codes with the qmax (7) offset
    var d = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i = i + 1u) {
        d = d + qs[c + i] * (f32((w >> (4u * i)) & 15u) - 7.0);
    }
    return d;
}

// Score lane `lane`'s partial dot of key kj (kv head kvh, channels koff ..): words lane,
// lane + LANES, ... of the head, four loads in flight.
fn packed_key_dot(kj: u32, kvh: u32, koff: u32, lane: u32, hd: u32) -> vec4<f32> {
    let cw = packed_cpw();
    let nw = hd / cw;
    let base = packed_base(kj, koff);
    var dot = vec4<f32>(0.0);
    var w = lane;
    for (; w + 3u * LANES < nw; w = w + 4u * LANES) {
        let a0 = kc[base + w];
        let a1 = kc[base + w + LANES];
        let a2 = kc[base + w + 2u * LANES];
        let a3 = kc[base + w + 3u * LANES];
        dot = dot + word_dot(a0, w * cw) + word_dot(a1, (w + LANES) * cw)
            + word_dot(a2, (w + 2u * LANES) * cw) + word_dot(a3, (w + 3u * LANES) * cw);
    }
    for (; w < nw; w = w + LANES) {
        dot = dot + word_dot(kc[base + w], w * cw);
    }
    if (FMT != FMT_F16) {
        dot = dot * kscale(kj, kvh);
    }
    return dot;
}

// The signed code of value channel vcol of position j (q8, a4), unscaled.
fn vcode(j: u32, vcol: u32) -> f32 {
    return absmax_value(vc[code_base(j) + word_index(vcol, fmt_bits())], vcol, j, 1.0);
}

// KIVI word path, values: e · value of tile key j at channel vcol, from its code (shifted to bit
// 0) and the tile's folded (e · factor · scale, e · factor · min) of its value group (`part`,
// [key][ngv][2], vb = 2 · the group's index in the head), or through vget for keys marked in
// `spec`.
fn vterm(j: u32, k0: u32, h: u32, vcol: u32, code: u32, vb: u32, ngv: u32) -> vec4<f32> {
    if (spec[j] != 0u) {
        return ex[j] * vget(k0 + j, h, vcol);
    }
    let b = j * ngv * 2u + vb;
    return part[b] * f32(code & ((1u << fmt_bits()) - 1u)) + part[b + 1u];
}

// The rotated formats: qs (hd channels, 4 heads) ← H·qs (σ, the butterflies, ·c: the store's
// operations; the scores need not be bit-exact).
fn rot_qs(lid: u32, hd: u32) {
    if (lid < hd && rot_neg(lid)) {
        qs[lid] = -qs[lid];
    }
    for (var hh = 1u; hh < hd; hh = hh * 2u) {
        workgroupBarrier();
        if (lid < hd / 2u) {
            let i = (lid / hh) * 2u * hh + lid % hh;
            let a = qs[i];
            let b = qs[i + hh];
            qs[i] = a + b;
            qs[i + hh] = a - b;
        }
    }
    workgroupBarrier();
    if (lid < hd) {
        qs[lid] = qs[lid] * g.rot_c;
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kvh = wg.x / p.n_hg;
    let hgi = wg.x % p.n_hg;
    let t = wg.y;
    let s = wg.z;
    let group = p.n_head / p.n_head_kv;
    let h0 = kvh * group + hgi * GM;
    let nh = min(GM, group - hgi * GM);
    let hd = p.head_dim;
    let q_dim = p.n_head * hd;
    let koff = kvh * hd;
    let n_kv = min(step.p0 + t + 1u, p.n_ctx);
    // a sliding window (p.window > 0): only the last n_win keys k_lo .. n_kv
    let n_win = select(n_kv, min(n_kv, p.window), p.window > 0u);
    let k_lo = n_kv - n_win;
    let chunk = max((n_win + p.n_split - 1u) / p.n_split, MIN_CHUNK);
    if (s * chunk >= n_win) {
        return;
    }
    let k_begin = k_lo + s * chunk;
    let k_end = min(k_begin + chunk, n_kv);
    if (is_kivi()) {
        qend = g.resid * (held() / g.resid);
    }
    // KIVI word path (keys): invocation (kw, slot) scores a run of consecutive keys of a tile
    // over the channels of code words wa + slot·wpi .. + wpi of the row (the words covering this
    // kv head's channels; channels of a straddling 3-bit word outside the head are masked), with
    // the query folded with the key group's per-channel scale (sq, reloaded when the group
    // changes) and Σ q · min (sb): a code word load and CPW multiply-adds per word and key instead
    // of a code and a parameter load per channel. The ns partial dots of a key are ns + 1 apart
    // in `part`, so a tile holds ≤ 576 / (ns + 1) keys (64 at head_dim 128 in q4).
    let cw = cpw();
    let wpi = max(1u, 16u / cw);
    let wa = koff / cw;
    let nw = (koff + hd - 1u) / cw - wa + 1u;
    let ns = (nw + wpi - 1u) / wpi;
    let nkw = WG / ns;
    let kw = lid / ns;
    let slot = lid % ns;
    // KIVI values: the tile's e · factor · (scale, min) per (key, value group of this head) are
    // folded into `part` ([key][ngv][2]) once, so a value costs a code load and two multiply-adds.
    let ga = div_group(koff);
    let ngv = div_group(koff + hd - 1u) - ga + 1u;
    let vfast = word_path() && ngv * 32u <= 576u;
    var tile = TILE;
    var np = LANES;
    var pstride = PSTRIDE;
    if (word_path()) {
        np = ns;
        pstride = ns + 1u;
        for (; tile > 16u && (tile * pstride > 576u || (vfast && tile * ngv * 2u > 576u)); tile = tile / 2u) {
        }
    }
    if (lid < hd) {
        // the 4 heads' loads in flight together (heads past the group read head h0 again)
        let qb = t * q_dim + h0 * hd + lid;
        qs[lid] = vec4<f32>(
            q[qb],
            q[qb + select(0u, hd, nh > 1u)],
            q[qb + select(0u, 2u * hd, nh > 2u)],
            q[qb + select(0u, 3u * hd, nh > 3u)],
        );
    }
    if (lid < GM) {
        atomicStore(&amax[lid], ord(-3.0e38));
    }
    workgroupBarrier();
    if (is_rot()) {
        // the rotated formats: the 4 heads' queries into the cache's space, H·q
        rot_qs(lid, hd);
    }
    // score step: key kk of each group of KPP, dims lane, lane + LANES, ...
    let kk = lid / LANES;
    let lane = lid % LANES;
    // value step: key group kg of vg, dim d0 (head_dim ≤ WG)
    let vg = WG / hd;
    let kg = lid / hd;
    let d0 = lid % hd;
    var m = vec4<f32>(-3.0e38);
    var l = vec4<f32>(0.0);
    var acc0 = vec4<f32>(0.0);
    // KIVI word path: the folded query of the key group `cur` (CPW ≤ 16 channels of a word)
    var sq: array<vec4<f32>, 16>;
    var sb = vec4<f32>(0.0);
    var cur = 0xffffffffu;
    let bits = fmt_bits();
    let cmask = (1u << bits) - 1u;
    // KIVI per-channel path: quantized keys of a layer of its own through kivi_key_dot
    let kblocks = is_kivi() && MC == 0u && hd % 64u == 0u;
    // f16 / q8 / a4 read a word at a time; the absmax values through e · scale in `sc`
    let pk = packed();
    let pkv = pk && FMT != FMT_F16;
    for (var k0 = k_begin; k0 < k_end; k0 = k0 + tile) {
        let cnt = min(tile, k_end - k0);
        if (word_path()) {
            if (kw < nkw) {
                let kpi = (cnt + nkw - 1u) / nkw;
                let jb = kw * kpi;
                let je = min(jb + kpi, cnt);
                let w0 = wa + slot * wpi;
                for (var j = jb; j < je; j = j + 1u) {
                    let kj = k0 + j;
                    let f = kfactor(kj, kvh);
                    var dot = vec4<f32>(0.0);
                    if (f < 0.0) {
                        for (var u = 0u; u < wpi; u = u + 1u) {
                            for (var i = 0u; i < cw; i = i + 1u) {
                                let ch = (w0 + u) * cw + i - koff;
                                if (ch < hd) {
                                    dot = dot + qs[ch] * kget(kj, kvh, koff + ch);
                                }
                            }
                        }
                    } else {
                        let gk = div_group(kj);
                        if (gk != cur) {
                            cur = gk;
                            sb = vec4<f32>(0.0);
                            for (var u = 0u; u < wpi; u = u + 1u) {
                                for (var i = 0u; i < cw; i = i + 1u) {
                                    let ch = (w0 + u) * cw + i - koff;
                                    var v = vec4<f32>(0.0);
                                    if (ch < hd) {
                                        let sm = kc[g.par + gk * g.row + koff + ch];
                                        v = qs[ch] * f16_bits_to_f32(sm & 0xffffu);
                                        sb = sb + qs[ch] * f16_bits_to_f32(sm >> 16u);
                                    }
                                    sq[u * cw + i] = v;
                                }
                            }
                        }
                        dot = sb;
                        for (var u = 0u; u < wpi; u = u + 1u) {
                            // past the head's last word: a word of the row (its sq are 0)
                            let code = kc[kj * g.wpr + min(w0 + u, wa + nw - 1u)];
                            for (var i = 0u; i < cw; i = i + 1u) {
                                dot = dot + sq[u * cw + i] * f32((code >> (i * bits)) & cmask);
                            }
                        }
                        dot = dot * f;
                    }
                    part[j * pstride + slot] = dot;
                }
            }
        } else {
            for (var ps = 0u; ps < cnt; ps = ps + KPP) {
                let j = ps + kk;
                var dot = vec4<f32>(0.0);
                if (j < cnt && kblocks && k0 + j < qend) {
                    dot = kivi_key_dot(k0 + j, koff, lane, hd);
                } else if (j < cnt && pk) {
                    dot = packed_key_dot(k0 + j, kvh, koff, lane, hd);
                } else if (j < cnt) {
                    let kj = k0 + j;
                    var d = lane;
                    // 8 loads in flight (one 256-dim row, two 128-dim ones), then the rest
                    for (; d + 7u * LANES < hd; d = d + 8u * LANES) {
                        let a0 = kget(kj, kvh, koff + d);
                        let a1 = kget(kj, kvh, koff + d + LANES);
                        let a2 = kget(kj, kvh, koff + d + 2u * LANES);
                        let a3 = kget(kj, kvh, koff + d + 3u * LANES);
                        let a4 = kget(kj, kvh, koff + d + 4u * LANES);
                        let a5 = kget(kj, kvh, koff + d + 5u * LANES);
                        let a6 = kget(kj, kvh, koff + d + 6u * LANES);
                        let a7 = kget(kj, kvh, koff + d + 7u * LANES);
                        dot = dot + qs[d] * a0 + qs[d + LANES] * a1 + qs[d + 2u * LANES] * a2
                            + qs[d + 3u * LANES] * a3 + qs[d + 4u * LANES] * a4
                            + qs[d + 5u * LANES] * a5 + qs[d + 6u * LANES] * a6
                            + qs[d + 7u * LANES] * a7;
                    }
                    for (; d < hd; d = d + LANES) {
                        dot = dot + qs[d] * kget(kj, kvh, koff + d);
                    }
                }
                part[j * PSTRIDE + lane] = dot;
            }
        }
        workgroupBarrier();
        if (lid < cnt) {
            var dot = vec4<f32>(0.0);
            for (var i = 0u; i < np; i = i + 1u) {
                dot = dot + part[lid * pstride + i];
            }
            let sv = dot * p.scale;
            sc[lid] = sv;
            atomicMax(&amax[0], ord(sv.x));
            atomicMax(&amax[1], ord(sv.y));
            atomicMax(&amax[2], ord(sv.z));
            atomicMax(&amax[3], ord(sv.w));
        }
        workgroupBarrier();
        let m_new = vec4<f32>(
            unord(atomicLoad(&amax[0])),
            unord(atomicLoad(&amax[1])),
            unord(atomicLoad(&amax[2])),
            unord(atomicLoad(&amax[3])),
        );
        if (lid < cnt) {
            let e = exp(sc[lid] - m_new);
            ex[lid] = e;
            if (pkv) {
                // only this invocation reads sc[lid] in this phase (vfast is KIVI's)
                sc[lid] = e * vscale(k0 + lid, kvh);
            }
        }
        if (vfast) {
            // fold e · factor into each (key, value group)'s scale and min
            for (var i = lid; i < cnt * ngv; i = i + WG) {
                let j = i / ngv;
                let gi = i % ngv;
                let kj = k0 + j;
                let f = vfactor(kj, kvh);
                if (gi == 0u) {
                    spec[j] = select(0u, 1u, f < 0.0);
                }
                if (f >= 0.0) {
                    let e = exp(sc[j] - m_new) * f;
                    let sm = vc[g.par + kj * g.ngroups + ga + gi];
                    part[i * 2u] = e * f16_bits_to_f32(sm & 0xffffu);
                    part[i * 2u + 1u] = e * f16_bits_to_f32(sm >> 16u);
                }
            }
        }
        let corr = exp(m - m_new);
        m = m_new;
        l = l * corr;
        acc0 = acc0 * corr;
        workgroupBarrier();
        if (kg < vg) {
            var j = kg;
            let vcol = koff + d0;
            if (vfast) {
                let vw = word_index(vcol, bits);
                let vsh = (vcol % cw) * bits;
                let vb = (div_group(vcol) - ga) * 2u;
                // 8 code words in flight, then the rest
                for (; j + 7u * vg < cnt; j = j + 8u * vg) {
                    let c0 = vc[(k0 + j) * g.wpr + vw];
                    let c1 = vc[(k0 + j + vg) * g.wpr + vw];
                    let c2 = vc[(k0 + j + 2u * vg) * g.wpr + vw];
                    let c3 = vc[(k0 + j + 3u * vg) * g.wpr + vw];
                    let c4 = vc[(k0 + j + 4u * vg) * g.wpr + vw];
                    let c5 = vc[(k0 + j + 5u * vg) * g.wpr + vw];
                    let c6 = vc[(k0 + j + 6u * vg) * g.wpr + vw];
                    let c7 = vc[(k0 + j + 7u * vg) * g.wpr + vw];
                    l = l + ex[j] + ex[j + vg] + ex[j + 2u * vg] + ex[j + 3u * vg]
                        + ex[j + 4u * vg] + ex[j + 5u * vg] + ex[j + 6u * vg] + ex[j + 7u * vg];
                    acc0 = acc0 + vterm(j, k0, kvh, vcol, c0 >> vsh, vb, ngv)
                        + vterm(j + vg, k0, kvh, vcol, c1 >> vsh, vb, ngv)
                        + vterm(j + 2u * vg, k0, kvh, vcol, c2 >> vsh, vb, ngv)
                        + vterm(j + 3u * vg, k0, kvh, vcol, c3 >> vsh, vb, ngv)
                        + vterm(j + 4u * vg, k0, kvh, vcol, c4 >> vsh, vb, ngv)
                        + vterm(j + 5u * vg, k0, kvh, vcol, c5 >> vsh, vb, ngv)
                        + vterm(j + 6u * vg, k0, kvh, vcol, c6 >> vsh, vb, ngv)
                        + vterm(j + 7u * vg, k0, kvh, vcol, c7 >> vsh, vb, ngv);
                }
                for (; j < cnt; j = j + vg) {
                    l = l + ex[j];
                    let c = vc[(k0 + j) * g.wpr + vw];
                    acc0 = acc0 + vterm(j, k0, kvh, vcol, c >> vsh, vb, ngv);
                }
            } else if (pkv) {
                // 8 code words in flight, then the rest; sc = e · scale of each key
                for (; j + 7u * vg < cnt; j = j + 8u * vg) {
                    let a0 = vcode(k0 + j, vcol);
                    let a1 = vcode(k0 + j + vg, vcol);
                    let a2 = vcode(k0 + j + 2u * vg, vcol);
                    let a3 = vcode(k0 + j + 3u * vg, vcol);
                    let a4 = vcode(k0 + j + 4u * vg, vcol);
                    let a5 = vcode(k0 + j + 5u * vg, vcol);
                    let a6 = vcode(k0 + j + 6u * vg, vcol);
                    let a7 = vcode(k0 + j + 7u * vg, vcol);
                    l = l + ex[j] + ex[j + vg] + ex[j + 2u * vg] + ex[j + 3u * vg]
                        + ex[j + 4u * vg] + ex[j + 5u * vg] + ex[j + 6u * vg] + ex[j + 7u * vg];
                    acc0 = acc0 + sc[j] * a0 + sc[j + vg] * a1 + sc[j + 2u * vg] * a2
                        + sc[j + 3u * vg] * a3 + sc[j + 4u * vg] * a4 + sc[j + 5u * vg] * a5
                        + sc[j + 6u * vg] * a6 + sc[j + 7u * vg] * a7;
                }
                for (; j < cnt; j = j + vg) {
                    l = l + ex[j];
                    acc0 = acc0 + sc[j] * vcode(k0 + j, vcol);
                }
            } else {
                // 8 value rows in flight, then the rest
                for (; j + 7u * vg < cnt; j = j + 8u * vg) {
                    let a0 = vget(k0 + j, kvh, vcol);
                    let a1 = vget(k0 + j + vg, kvh, vcol);
                    let a2 = vget(k0 + j + 2u * vg, kvh, vcol);
                    let a3 = vget(k0 + j + 3u * vg, kvh, vcol);
                    let a4 = vget(k0 + j + 4u * vg, kvh, vcol);
                    let a5 = vget(k0 + j + 5u * vg, kvh, vcol);
                    let a6 = vget(k0 + j + 6u * vg, kvh, vcol);
                    let a7 = vget(k0 + j + 7u * vg, kvh, vcol);
                    let e0 = ex[j];
                    let e1 = ex[j + vg];
                    let e2 = ex[j + 2u * vg];
                    let e3 = ex[j + 3u * vg];
                    let e4 = ex[j + 4u * vg];
                    let e5 = ex[j + 5u * vg];
                    let e6 = ex[j + 6u * vg];
                    let e7 = ex[j + 7u * vg];
                    l = l + e0 + e1 + e2 + e3 + e4 + e5 + e6 + e7;
                    acc0 = acc0 + e0 * a0 + e1 * a1 + e2 * a2 + e3 * a3 + e4 * a4 + e5 * a5
                        + e6 * a6 + e7 * a7;
                }
                for (; j < cnt; j = j + vg) {
                    let e = ex[j];
                    l = l + e;
                    acc0 = acc0 + e * vget(k0 + j, kvh, vcol);
                }
            }
        }
        if (word_path()) {
            // the next tile's score step overwrites `part`, read by this tile's value step
            workgroupBarrier();
        }
        // (Otherwise the next tile's first writes to sc / ex / part come after barriers that
        // every invocation reaches only once done with this tile's reads.)
    }
    if (vg > 1u) {
        // Sum the key groups' accumulators and Σ exp (group order: deterministic). The last
        // reads of `part` were before the tile's second barrier (KIVI: its fourth).
        if (kg < vg) {
            part[lid] = acc0;
            if (d0 == 0u) {
                part[WG + kg] = l;
            }
        }
        workgroupBarrier();
        if (lid < hd) {
            var a = vec4<f32>(0.0);
            var ls = vec4<f32>(0.0);
            for (var g = 0u; g < vg; g = g + 1u) {
                a = a + part[g * hd + lid];
                ls = ls + part[WG + g];
            }
            acc0 = a;
            l = ls;
        }
    }
    if (is_rot()) {
        // Hᵀ of each head's accumulator (linear, so the split-K partials merge as before)
        workgroupBarrier();
        if (lid < hd) {
            part[lid] = acc0;
        }
        for (var hh = 1u; hh < hd; hh = hh * 2u) {
            workgroupBarrier();
            if (lid < hd / 2u) {
                let i = (lid / hh) * 2u * hh + lid % hh;
                let a = part[i];
                let b = part[i + hh];
                part[i] = a + b;
                part[i + hh] = a - b;
            }
        }
        workgroupBarrier();
        if (lid < hd) {
            let y = part[lid] * g.rot_c;
            acc0 = select(y, -y, rot_neg(lid));
        }
    }
    if (lid >= hd) {
        return;
    }
    if (p.n_split == 1u) {
        let inv = 1.0 / l;
        for (var g = 0u; g < GM; g = g + 1u) {
            if (g < nh) {
                let ob = t * q_dim + (h0 + g) * hd;
                out[ob + d0] = acc0[g] * inv[g];
            }
        }
        return;
    }
    for (var g = 0u; g < GM; g = g + 1u) {
        if (g < nh) {
            let pb = ((t * p.n_head + h0 + g) * p.n_split + s) * (hd + 2u);
            if (lid == 0u) {
                out[pb] = m[g];
                out[pb + 1u] = l[g];
            }
            out[pb + 2u + d0] = acc0[g];
        }
    }
}
