// Fused NeuZip decode + GEMV: y[t][row] = Σ_c W[row][c] · x[t][c] for a NeuZip matrix kept
// compressed (layouts 1 and 2, blocks of whole rows: blocks_per_row = 1). The decoded matrix is
// never written: each invocation decodes its lane's symbols exactly as `neuzip_decode.wgsl` does
// (same Params, same table built in workgroup memory, same checks), turns each element into
// an f32 and multiplies it by x right away; per row, the lanes' partial sums are reduced in
// workgroup memory and lane 0 writes y. So the scratch is per workgroup (the 8 KiB table, 1 KiB
// of cdf and 1 KiB of partial sums), not per tensor. Up to 4 tokens per dispatch (the host loops for more).
//
// Bindings: p (NeuZip chunk params); q (GEMV params); meta, data as in neuzip_decode.wgsl
// (meta read-write: its word `status_word` is this kernel's status, since WebGPU guarantees
// only 4 storage buffers per stage); x [tokens][x_stride] f32; y [tokens][out_stride] f32.

struct Params {
    lanes: u32,
    block_len: u32,
    blocks_per_row: u32,
    row_len: u32,
    n_elements: u32,
    b0: u32,
    n_syms: u32,
    table_word: u32,
    block_words_word: u32,
    states_word: u32,
    lane_starts_word: u32,
    words_base: u32,
    raw_word_offset: u32,
    raw_bit_base: u32,
    out_base: u32,
    man: u32,
    exp_bits: u32,
    k: u32,
    width: u32,
    group: u32,
    bpw: u32,
    b_end: u32,
    status_word: u32,
    whole_words: u32,
}

struct Gemv {
    rows_per_block: u32,
    n_tokens: u32,
    tok0: u32,
    x_stride: u32,
    out_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> q: Gemv;
@group(0) @binding(2) var<storage, read_write> meta_: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> data: array<u32>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> lut: array<u32, 2048>;
var<workgroup> cdf: array<u32, 257>;
var<workgroup> part: array<f32, 256>;

fn lane_start(b: u32, l: u32) -> u32 {
    let i = b * p.lanes + l;
    return (atomicLoad(&meta_[p.lane_starts_word + (i >> 1u)]) >> (16u * (i & 1u))) & 0xffffu;
}

fn word(k: u32) -> u32 {
    let kk = k - p.words_base;
    return (data[kk >> 1u] >> (16u * (kk & 1u))) & 0xffffu;
}

fn raw_field(i: u32) -> u32 {
    let wbits = p.k + 1u;
    let bit = i * wbits - p.raw_bit_base;
    let wi = p.raw_word_offset + (bit >> 5u);
    let sh = bit & 31u;
    var f = data[wi] >> sh;
    if (sh + wbits > 32u) {
        f = f | (data[wi + 1u] << (32u - sh));
    }
    return f & ((1u << wbits) - 1u);
}

// Exponent symbol + raw field of element j → the element as f32 (bit-exact conversion).
fn value(sym: u32, j: u32) -> f32 {
    let f = raw_field(j);
    let sign = (f >> p.k) & 1u;
    let kept = f & ((1u << p.k) - 1u);
    let bits = (sign << (p.man + p.exp_bits)) | (sym << p.man) | (kept << (p.man - p.k));
    if (p.width == 32u) {
        return bitcast<f32>(bits);
    }
    if (p.man == 10u) {
        return f16_bits_to_f32(bits);
    }
    return bitcast<f32>(bits << 16u);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    // Decode table from the blob's frequency table: the running cdf (invocation 0, at most 256
    // entries), then every invocation fills 8 slots, finding each slot's symbol by binary search.
    if (lid == 0u) {
        var c = 0u;
        for (var i = 0u; i < p.n_syms; i = i + 1u) {
            cdf[i] = c;
            c = c + ((atomicLoad(&meta_[p.table_word + i]) >> 16u) & 0xfffu);
        }
        cdf[p.n_syms] = c;
    }
    workgroupBarrier();
    for (var sl = lid; sl < 2048u; sl = sl + 256u) {
        var lo = 0u;
        var hi = p.n_syms;
        while (hi - lo > 1u) {
            let mid = (lo + hi) / 2u;
            if (cdf[mid] <= sl) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let e = atomicLoad(&meta_[p.table_word + lo]);
        lut[sl] = ((sl - cdf[lo]) << 20u) | (((e >> 16u) & 0xfffu) << 8u) | (e & 0xffu);
    }
    workgroupBarrier();

    let bl = lid / p.lanes;
    let l = lid % p.lanes;
    let b = p.b0 + wg.x * p.bpw + bl;
    let live = bl < p.bpw && b < p.b_end;
    let cols = p.row_len;
    var start = 0u;
    var len = 0u;
    var xs = 0u;
    var k = 0u;
    var kend = 0u;
    if (live) {
        start = b * p.block_len;
        len = min(p.n_elements - start, p.block_len);
        let base = atomicLoad(&meta_[p.block_words_word + b]);
        kend = atomicLoad(&meta_[p.block_words_word + b + 1u]);
        if (l + 1u < p.lanes) {
            kend = base + lane_start(b, l + 1u);
        }
        xs = atomicLoad(&meta_[p.states_word + b * p.lanes + l]);
        k = base + lane_start(b, l);
    }
    var bad = false;
    let g = p.group;
    var pos = l * g; // next position of this lane in its block
    var s = 0u; // index in the current group
    // Lane 0 of each block reduces; `red` is the first power of two ≥ lanes, halved.
    var red = 1u;
    while (red < p.lanes) {
        red = red * 2u;
    }
    for (var r = 0u; r < q.rows_per_block; r = r + 1u) {
        let row_end = min((r + 1u) * cols, len);
        var acc = vec4<f32>(0.0);
        while (live && !bad && pos < row_end) {
            let e = lut[xs & 0x7ffu];
            let sym = e & 0xffu;
            xs = ((e >> 8u) & 0xfffu) * (xs >> 11u) + (e >> 20u);
            if (xs < 0x8000u) {
                if (k >= kend) {
                    bad = true;
                    break;
                }
                xs = (xs << 16u) | word(k);
                k = k + 1u;
            }
            let w = value(sym, start + pos);
            let c = q.tok0 * q.x_stride + pos - r * cols;
            acc.x = acc.x + w * x[c];
            if (q.n_tokens > 1u) {
                acc.y = acc.y + w * x[c + q.x_stride];
            }
            if (q.n_tokens > 2u) {
                acc.z = acc.z + w * x[c + 2u * q.x_stride];
            }
            if (q.n_tokens > 3u) {
                acc.w = acc.w + w * x[c + 3u * q.x_stride];
            }
            s = s + 1u;
            pos = pos + 1u;
            if (s == g) {
                s = 0u;
                pos = pos + (p.lanes - 1u) * g;
            }
        }
        for (var t = 0u; t < q.n_tokens; t = t + 1u) {
            part[lid] = acc[t];
            workgroupBarrier();
            for (var h = red / 2u; h > 0u; h = h / 2u) {
                if (l < h && l + h < p.lanes && bl < p.bpw) {
                    part[lid] = part[lid] + part[lid + h];
                }
                workgroupBarrier();
            }
            if (live && l == 0u && r * cols < len) {
                let row = start / cols + r;
                y[(q.tok0 + t) * q.out_stride + row] = part[lid];
            }
            workgroupBarrier();
        }
    }
    if (live && (bad || xs != 0x8000u || k != kend)) {
        atomicStore(&meta_[p.status_word], 1u);
    }
}
