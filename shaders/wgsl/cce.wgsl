// Fused Cut-Cross-Entropy, pass A (arXiv 2411.09009; reference: tern-reference `cce.rs`): for a
// block of BP positions and TILES tiles of BV head rows (64 × 64, or 16 × 256 for few
// positions), the logit tile
// z[p][v] = Σ_k hidden[p][k] · W[v][k] is computed in workgroup memory (never written out), and
// folded into a running per-position maximum and Σ exp(z − max). Each head row read is used for
// BP positions, so the head is read ⌈n / BP⌉ times instead of n times.
//
// Tiling (SGEMM-style): 256 invocations as TY × TX (16 × 16, or 4 × 64); invocation (ty, tx)
// owns positions 4·ty .. 4·ty + 3 and head rows 4·tx .. 4·tx + 3 of the tile (16 accumulators).
// The reduction dimension goes in steps of BK = TY: each invocation dequantizes 4 consecutive
// elements of one head row (ggml blocks or float rows, decoded in registers) and BP·BK/4 of them
// load 4 consecutive hidden values of one position; both are stored transposed ([k][position],
// [k][row]) as vec4 so the inner loop reads one vec4 of each per k.
//
// Each invocation keeps its own running (max, sum) for its 4 positions over its columns of every
// tile; at the end the TX column-invocations of each position are merged in tx order (fixed
// order: deterministic) and the workgroup writes one partial per position. The invocation whose columns
// hold a position's target row writes that logit to the target slot (one writer, no atomics).
// Pass B (cce_combine.wgsl) merges the partials of every vocab block and part in block order.
//
// Override constants: HEAD 0 = Q8_0, 1 = Q4_0, 2 = Q4_1, 3 = Q6_K (ggml blocks, byte-packed,
// dequantized as ggml: q·d, (q − 8)·d, q·d + m, (d·sc)·q), 4..10 = ggml_kquants.wgsl's types
// (Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, IQ4_NL; its kq4), 16 = f32, 17 = f16, 18 = bf16 (row-major
// elements from element elem_offset of the binding).
// Bindings: w     this part's head rows (rows × cols);
//           hidden [*][cols] f32, this chunk's positions start at row pos0;
//           targets [*] u32 vocab ids (global rows), indexed pos0 + p;
//           part   scratch [n_blocks][n_pos] (max, sum) pairs, then [n_pos] target logits.

// #import common
// #import byte_load
// #import ggml_kquants

struct Params {
    rows: u32,
    cols: u32,
    blocks_per_row: u32,
    row0: u32,
    n_pos: u32,
    pos0: u32,
    block0: u32,
    n_blocks: u32,
    tiles: u32,
    elem_offset: u32,
    _pad1: u32,
    _pad2: u32,
}

override HEAD: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> hidden: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<u32>;
@group(0) @binding(4) var<storage, read_write> part: array<f32>;

// TY position groups × TX row groups of invocations, (4·R) × 4 logits each: BP = 4·TY·R positions
// and BV = 4·TX head rows per tile; BK = TY keeps the staged tiles at 4·TY·BP + 1024 floats.
override TY: u32 = 16u;
override R: u32 = 1u;
override TX: u32 = 256u / TY;
override BP: u32 = 4u * TY * R;
override BV: u32 = 4u * TX;
override BK: u32 = TY;
// vec4s of positions per k in `hs`.
override PV: u32 = TY * R;
// Below every logit; finite so that differences stay defined.
const NEG: f32 = -3.0e38;

// [BK][BP / 4] hidden values and [BK][BV / 4] head values; reused for the final merge.
var<workgroup> hs: array<vec4<f32>, 512>;
var<workgroup> ws: array<vec4<f32>, 256>;

fn bf16_bits_to_f32(h: u32) -> f32 {
    return bitcast<f32>(h << 16u);
}

// Element e (row-major index) of a 16-bit float head.
fn half_at(e: u32) -> f32 {
    let bits = (w[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu;
    if (HEAD == 17u) {
        return f16_bits_to_f32(bits);
    }
    return bf16_bits_to_f32(bits);
}

// Elements k .. k + 3 of local head row `row` (k a multiple of 4; ggml: cols a multiple of the
// block).
fn head4(row: u32, k: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (HEAD >= 4u && HEAD <= 10u) {
        // blocks_per_row counts the type's blocks
        return kq4(HEAD, row * p.blocks_per_row * kq_block_bytes(HEAD), k);
    }
    if (HEAD == 3u) {
        // Q6_K super-block of 256: element e = 128·hf + 32·qd + l; ql byte 64·hf + 32·(qd & 1) + l
        // (nibble qd / 2), qh byte 32·hf + l (bits 2·qd), scale byte 8·hf + l / 16 + 2·qd, d at 208.
        let off = (row * p.blocks_per_row + (k >> 8u)) * 210u;
        let e = k & 255u;
        let hf = e >> 7u;
        let qd = (e >> 5u) & 3u;
        let l = e & 31u;
        let d = f16_bits_to_f32(load32(off + 208u) & 0xffffu);
        let scb = load32(off + 192u + hf * 8u + l / 16u + 2u * qd) & 0xffu;
        let dsc = d * f32(extractBits(bitcast<i32>(scb), 0u, 8u));
        let qlw = load32(off + hf * 64u + (qd & 1u) * 32u + l);
        let qhw = load32(off + 128u + hf * 32u + l);
        let sh = select(0u, 4u, qd >= 2u);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let lo = (qlw >> (8u * i + sh)) & 0xfu;
            let hi = (qhw >> (8u * i + 2u * qd)) & 3u;
            v[i] = dsc * f32(i32(lo | (hi << 4u)) - 32);
        }
        return v;
    }
    if (HEAD <= 2u) {
        var bb = 34u;
        if (HEAD == 1u) {
            bb = 18u;
        } else if (HEAD == 2u) {
            bb = 20u;
        }
        let off = (row * p.blocks_per_row + (k >> 5u)) * bb;
        let j = k & 31u;
        let d = f16_bits_to_f32(load32(off) & 0xffffu);
        if (HEAD == 0u) {
            let q = bitcast<i32>(load32(off + 2u + j));
            for (var i = 0u; i < 4u; i = i + 1u) {
                v[i] = f32(extractBits(q, 8u * i, 8u)) * d;
            }
            return v;
        }
        var qoff = off + 2u;
        var m = 0.0;
        if (HEAD == 2u) {
            m = f16_bits_to_f32(load32(off + 2u) & 0xffffu);
            qoff = off + 4u;
        }
        // Byte b of qs: low nibble = element b, high nibble = element b + 16.
        let q = load32(qoff + (j & 15u));
        let sh = select(0u, 4u, j >= 16u);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let nib = f32((q >> (8u * i + sh)) & 0xfu);
            if (HEAD == 1u) {
                v[i] = (nib - 8.0) * d;
            } else {
                v[i] = nib * d + m;
            }
        }
        return v;
    }
    let base = p.elem_offset + row * p.cols + k;
    if (HEAD >= 17u && (base & 1u) == 0u && k + 3u < p.cols) {
        // 4 halves in 2 aligned words.
        let w0 = w[base >> 1u];
        let w1 = w[(base >> 1u) + 1u];
        if (HEAD == 17u) {
            return vec4<f32>(f16_bits_to_f32(w0 & 0xffffu), f16_bits_to_f32(w0 >> 16u),
                             f16_bits_to_f32(w1 & 0xffffu), f16_bits_to_f32(w1 >> 16u));
        }
        return vec4<f32>(bitcast<f32>(w0 << 16u), bitcast<f32>(w0 & 0xffff0000u),
                         bitcast<f32>(w1 << 16u), bitcast<f32>(w1 & 0xffff0000u));
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (k + i < p.cols) {
            if (HEAD == 16u) {
                v[i] = bitcast<f32>(w[base + i]);
            } else {
                v[i] = half_at(base + i);
            }
        }
    }
    return v;
}

// Running (max, Σ exp) of 4 positions.
struct Run {
    m: vec4<f32>,
    s: vec4<f32>,
}

// Fold one tile's logits of 4 positions (a0..a3: position i's 4 rows from c0) into `run`; write
// a target's logit when its row is among them. q0: the positions' first index in the chunk.
fn fold(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, run: Run, tgt: vec4<u32>,
        c0: u32, q0: u32) -> Run {
    let valid = vec4<bool>(c0 < p.rows, c0 + 1u < p.rows, c0 + 2u < p.rows, c0 + 3u < p.rows);
    var m = run.m;
    var s = run.s;
    for (var i = 0u; i < 4u; i = i + 1u) {
        var z = a0;
        if (i == 1u) {
            z = a1;
        } else if (i == 2u) {
            z = a2;
        } else if (i == 3u) {
            z = a3;
        }
        let mo = m[i];
        let zm = select(vec4<f32>(NEG), z, valid);
        let mn = max(mo, max(max(zm.x, zm.y), max(zm.z, zm.w)));
        let e = select(vec4<f32>(0.0), exp(z - mn), valid);
        s[i] = s[i] * exp(mo - mn) + ((e.x + e.y) + (e.z + e.w));
        m[i] = mn;
        let tl = tgt[i] - (p.row0 + c0);
        if (tl < 4u && c0 + tl < p.rows) {
            part[2u * p.n_blocks * p.n_pos + q0 + i] = z[tl];
        }
    }
    return Run(m, s);
}

// Targets of positions q0 .. q0 + 3 of the chunk (0xffffffff past the end).
fn targets4(q0: u32) -> vec4<u32> {
    var t = vec4<u32>(0xffffffffu);
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (q0 + i < p.n_pos) {
            t[i] = targets[p.pos0 + q0 + i];
        }
    }
    return t;
}

// Merge the TX column-invocations' runs of position group `r` in tx order and write its partials.
fn merge(lid: u32, run: Run, q_base: u32, block: u32) {
    workgroupBarrier();
    hs[lid] = run.m;
    ws[lid] = run.s;
    workgroupBarrier();
    if (lid < 4u * TY) {
        let row = (lid / 4u) * TX;
        let c = lid % 4u;
        var mm = NEG;
        var ss = 0.0;
        for (var j = 0u; j < TX; j = j + 1u) {
            let mj = hs[row + j][c];
            let sj = ws[row + j][c];
            let mn = max(mm, mj);
            ss = ss * exp(mm - mn) + sj * exp(mj - mn);
            mm = mn;
        }
        let q = q_base + lid;
        if (q < p.n_pos) {
            let o = 2u * (block * p.n_pos + q);
            part[o] = mm;
            part[o + 1u] = ss;
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let tx = lid % TX;
    let ty = lid / TX;
    let pb = wg.y * BP;
    // Position group 0 of this invocation: pb + 4·ty + i; group 1 (R = 2): 4·TY further.
    let q0 = pb + 4u * ty;
    let q1 = q0 + 4u * TY;
    let tgt0 = targets4(q0);
    var tgt1 = vec4<u32>(0xffffffffu);
    if (R == 2u) {
        tgt1 = targets4(q1);
    }
    var run0 = Run(vec4<f32>(NEG), vec4<f32>(0.0));
    var run1 = run0;
    // Load roles: 4 consecutive k (from lk) of head row `ld` of the tile (every invocation); and
    // of hidden position `hl` for slots lid + 256·j below BP · BK / 4.
    let ld = lid / (BK / 4u);
    let lk = (lid % (BK / 4u)) * 4u;
    let vb = wg.x * p.tiles * BV;
    var nt = 0u;
    if (vb < p.rows) {
        nt = min(p.tiles, (p.rows - vb + BV - 1u) / BV);
    }
    for (var t = 0u; t < nt; t = t + 1u) {
        let v0 = vb + t * BV;
        var acc0 = vec4<f32>(0.0);
        var acc1 = vec4<f32>(0.0);
        var acc2 = vec4<f32>(0.0);
        var acc3 = vec4<f32>(0.0);
        var acc4 = vec4<f32>(0.0);
        var acc5 = vec4<f32>(0.0);
        var acc6 = vec4<f32>(0.0);
        var acc7 = vec4<f32>(0.0);
        for (var k0 = 0u; k0 < p.cols; k0 = k0 + BK) {
            for (var j = 0u; j < R; j = j + 1u) {
                let slot = lid + 256u * j;
                if (slot < BP * BK / 4u) {
                    let hl = slot / (BK / 4u);
                    let hk = (slot % (BK / 4u)) * 4u;
                    var hv = vec4<f32>(0.0);
                    if (pb + hl < p.n_pos) {
                        let hbase = (p.pos0 + pb + hl) * p.cols + k0 + hk;
                        for (var i = 0u; i < 4u; i = i + 1u) {
                            if (k0 + hk + i < p.cols) {
                                hv[i] = hidden[hbase + i];
                            }
                        }
                    }
                    for (var i = 0u; i < 4u; i = i + 1u) {
                        hs[(hk + i) * PV + hl / 4u][hl % 4u] = hv[i];
                    }
                }
            }
            let k = k0 + lk;
            var wv = vec4<f32>(0.0);
            if (v0 + ld < p.rows && k < p.cols) {
                wv = head4(v0 + ld, k);
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                ws[(lk + i) * TX + ld / 4u][ld % 4u] = wv[i];
            }
            workgroupBarrier();
            for (var kk = 0u; kk < BK; kk = kk + 1u) {
                let b = ws[kk * TX + tx];
                let a = hs[kk * PV + ty];
                acc0 = acc0 + a.x * b;
                acc1 = acc1 + a.y * b;
                acc2 = acc2 + a.z * b;
                acc3 = acc3 + a.w * b;
                if (R == 2u) {
                    let a2 = hs[kk * PV + TY + ty];
                    acc4 = acc4 + a2.x * b;
                    acc5 = acc5 + a2.y * b;
                    acc6 = acc6 + a2.z * b;
                    acc7 = acc7 + a2.w * b;
                }
            }
            workgroupBarrier();
        }
        let c0 = v0 + 4u * tx;
        run0 = fold(acc0, acc1, acc2, acc3, run0, tgt0, c0, q0);
        if (R == 2u) {
            run1 = fold(acc4, acc5, acc6, acc7, run1, tgt1, c0, q1);
        }
    }
    merge(lid, run0, pb, p.block0 + wg.x);
    if (R == 2u) {
        merge(lid, run1, pb + 4u * TY, p.block0 + wg.x);
    }
}
