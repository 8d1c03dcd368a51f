// Ternary GEMV (2-bit codes) with INT8 activations that skips zero activations: BitNet a4.8's
// inputs of the attention output projection (TopK 50%: half are zero) and of the FFN down
// projection (ReLU²: 75–86% zero). The same result as ternary_gemv.wgsl, bit for bit.
//
// Each workgroup first compacts the token's non-zero activation words (4 int8 columns each) into
// an ordered list in workgroup memory (each invocation owns a contiguous run of words; an
// exclusive scan of their counts places them). If the list holds at most `sparse_max_words`
// words (the host sets it from the measured break-even density), every row's lanes walk the list
// — one weight byte (4 codes) per listed word, gathered from the row — else they walk the whole
// row as the dense GEMV does. Integer group sums, then the reference's f32 order, as
// ternary_gemv.wgsl.
//
// Limits (checked by the launcher, which otherwise uses the dense kernel): 2-bit layout; scale
// groups of a multiple of 4 columns (or one per tensor); ≤ MAXW activation words per token;
// rows per workgroup × groups per row ≤ GSUM.
//
// Override constants: SCALE_TYPE (0 f32, 1 f16, 2 bf16); DOT (1 `dot4I8Packed`, 0 plain).
// Bindings: as ternary_gemv.wgsl (w, xq int8 activations, xs, y). Grid: x = row blocks of 8, y =
// tokens.

// #import common
// #import ternary_ops
// #import ternary_params

override SCALE_TYPE: u32 = 0u;
override DOT: u32 = 1u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<u32>;
@group(0) @binding(3) var<storage, read> xs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const TPR: u32 = 32u;
const MAXW: u32 = 1792u;
const GSUM: u32 = 1536u;
var<workgroup> list: array<u32, 1792>;
var<workgroup> gsum: array<atomic<i32>, 1536>;
var<workgroup> scan: array<u32, 256>;

fn group_of(aw: u32) -> u32 {
    if (p.group == 0u) {
        return 0u;
    }
    return (4u * aw) / p.group;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let rpw = WG / TPR;
    let lrow = lid / TPR;
    let lane = lid % TPR;
    let row = wg.x * rpw + lrow;
    let tok = wg.y;
    let gpr = p.groups_per_row;
    let tok_ok = tok < p.n_tokens;
    let abase = tok * p.act_stride;
    let nwords = (p.cols + 3u) / 4u;
    for (var i = lid; i < rpw * gpr; i = i + WG) {
        atomicStore(&gsum[i], 0);
    }
    // Compaction: invocation lid owns words [a0, a1).
    let per = (nwords + WG - 1u) / WG;
    let a0 = min(lid * per, nwords);
    let a1 = min(a0 + per, nwords);
    var cnt = 0u;
    if (tok_ok) {
        for (var i = a0; i < a1; i = i + 1u) {
            cnt = cnt + select(0u, 1u, xq[abase + i] != 0u);
        }
    }
    scan[lid] = cnt;
    workgroupBarrier();
    // Inclusive prefix sum (Hillis-Steele).
    for (var st = 1u; st < WG; st = st << 1u) {
        var add = 0u;
        if (lid >= st) {
            add = scan[lid - st];
        }
        workgroupBarrier();
        scan[lid] = scan[lid] + add;
        workgroupBarrier();
    }
    let nnz = scan[WG - 1u];
    let sparse = nnz <= min(p.sparse_max_words, MAXW);
    if (sparse && tok_ok) {
        var o = scan[lid] - cnt;
        for (var i = a0; i < a1; i = i + 1u) {
            if (xq[abase + i] != 0u) {
                list[o] = i;
                o = o + 1u;
            }
        }
    }
    workgroupBarrier();
    if (row < p.rows && tok_ok) {
        let wbase = row * p.words_per_row;
        var acc = 0i;
        var cur = 0u;
        if (sparse) {
            for (var i = lane; i < nnz; i = i + TPR) {
                let aw = list[i];
                let g = group_of(aw);
                if (g != cur) {
                    atomicAdd(&gsum[lrow * gpr + cur], acc);
                    acc = 0;
                    cur = g;
                }
                let cw = w[wbase + (aw >> 2u)];
                acc = acc + dot4(trits2(cw, aw & 3u), xq[abase + aw]);
            }
        } else {
            // Dense: 16 columns (one code word, four activation words) per step.
            for (var wi = lane; wi < p.words_per_row; wi = wi + TPR) {
                let cw = w[wbase + wi];
                for (var b = 0u; b < 4u; b = b + 1u) {
                    let aw = 4u * wi + b;
                    if (aw < nwords) {
                        let g = group_of(aw);
                        if (g != cur) {
                            atomicAdd(&gsum[lrow * gpr + cur], acc);
                            acc = 0;
                            cur = g;
                        }
                        acc = acc + dot4(trits2(cw, b), xq[abase + aw]);
                    }
                }
            }
        }
        atomicAdd(&gsum[lrow * gpr + cur], acc);
    }
    workgroupBarrier();
    if (row < p.rows && tok_ok) {
        for (var g = lane; g < gpr; g = g + TPR) {
            let si = select(row * gpr + g, 0u, p.group == 0u);
            let prod = f32(atomicLoad(&gsum[lrow * gpr + g])) * scale_at(si);
            atomicStore(&gsum[lrow * gpr + g], bitcast<i32>(prod));
        }
    }
    workgroupBarrier();
    if (lane == 0u && row < p.rows && tok_ok) {
        var sum = 0.0;
        for (var g = 0u; g < gpr; g = g + 1u) {
            sum = sum + bitcast<f32>(atomicLoad(&gsum[lrow * gpr + g]));
        }
        y[tok * p.out_stride + p.row0 + row] = div_rn(sum, xs[tok]);
    }
}
