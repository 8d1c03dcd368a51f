// Shared helpers (div_rn, exact f16 <-> f32 with integer ops): `// #import common` in every kernel.

// Correctly rounded f32 division (round to nearest, ties to even) for normal operands with a
// normal quotient: WGSL (and Vulkan's OpFDiv) only promise 2.5 ULP for `a / b`, and the CPU
// reference divides exactly, so kernels that must match it bit for bit divide with this. Zero,
// subnormal, infinite and NaN operands, and quotients that leave the normal range, fall back to
// `a / b` (the reference's inputs never get there: activation scales are ≥ 127/amax with amax
// clamped, see act_quant_int8.wgsl).
fn div_rn(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = (ua >> 23u) & 0xffu;
    let eb = (ub >> 23u) & 0xffu;
    if (ea == 0u || eb == 0u || ea == 255u || eb == 255u) {
        return a / b;
    }
    let sign = (ua ^ ub) & 0x80000000u;
    let ma = (ua & 0x7fffffu) | 0x800000u;
    let mb = (ub & 0x7fffffu) | 0x800000u;
    // q = floor(ma / mb · 2^25), 26 quotient bits by restoring division; r stays < 2^25.
    var r = ma;
    var q = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        q = q << 1u;
        if (r >= mb) {
            r = r - mb;
            q = q | 1u;
        }
        r = r << 1u;
    }
    var e = i32(ea) - i32(eb) + 126;
    var sh = 1u;
    if (q >= 0x2000000u) {
        sh = 2u;
        e = e + 1;
    }
    var m = q >> sh;
    let guard = (q >> (sh - 1u)) & 1u;
    let rest = (q & ((1u << (sh - 1u)) - 1u)) | r;
    if (guard == 1u && (rest != 0u || (m & 1u) == 1u)) {
        m = m + 1u;
    }
    if (m == 0x1000000u) {
        m = m >> 1u;
        e = e + 1;
    }
    if (e <= 0 || e >= 255) {
        return a / b;
    }
    return bitcast<f32>(sign | (u32(e) << 23u) | (m & 0x7fffffu));
}

// Byte `i` of a byte stream held in an array<u32> is `(a[i >> 2] >> ((i & 3) * 8)) & 0xff`;
// kernels inline that with their own buffer (WGSL cannot pass storage pointers around portably).

// IEEE binary16 bits (low 16 bits of h) to f32, exactly, with integer operations only
// (`unpack2x16float` needs a capability that downlevel adapters lack).
fn f16_bits_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // ±0 or subnormal: m · 2^-24, exact in f32.
        let mag = f32(m) * 5.9604644775390625e-8;
        return bitcast<f32>(sign | bitcast<u32>(mag));
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// Four 4-bit two's-complement values, one in the low nibble of each byte (high nibbles zero), as
// four int8 bytes: per byte ((v ^ 8) | 0x80) − 8 = 0x80 + value (no borrow), then ^ 0x80.
fn sext4(v: u32) -> u32 {
    return (((v ^ 0x08080808u) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}

// dot4I8Packed without the packed integer dot product: the four signed byte products summed.
fn dot4_plain(a: u32, b: u32) -> i32 {
    let x = bitcast<i32>(a);
    let y = bitcast<i32>(b);
    return extractBits(x, 0u, 8u) * extractBits(y, 0u, 8u)
        + extractBits(x, 8u, 8u) * extractBits(y, 8u, 8u)
        + extractBits(x, 16u, 8u) * extractBits(y, 16u, 8u)
        + extractBits(x, 24u, 8u) * extractBits(y, 24u, 8u);
}

// f32 to IEEE binary16 bits (low 16 bits), round to nearest, ties to even — the CPU's
// `half::f16::from_f32` — with integer operations only (so every adapter rounds alike).
// Overflow gives ±inf, NaN stays NaN, values below half the smallest subnormal give ±0.
fn f32_to_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let e = i32((b >> 23u) & 0xffu);
    let m = b & 0x7fffffu;
    if (e == 255) {
        return sign | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u);
    }
    let he = e - 112;
    if (he >= 31) {
        return sign | 0x7c00u;
    }
    var v: u32;
    var shift: u32;
    if (he <= 0) {
        if (he < -10) {
            return sign;
        }
        // subnormal: (1.m · 2^23) · 2^(he − 14 − 23 + 23) in units of 2^-24
        v = m | 0x800000u;
        shift = u32(14 - he);
    } else {
        v = (u32(he) << 23u) | m;
        shift = 13u;
    }
    let half_ulp = 1u << (shift - 1u);
    let rest = v & ((1u << shift) - 1u);
    var q = v >> shift;
    if (rest > half_ulp || (rest == half_ulp && (q & 1u) == 1u)) {
        q = q + 1u; // a carry into the exponent is the correct rounding (up to inf)
    }
    return sign | q;
}

// The KV cache's geometry uniform, shared by kv_store, attention and minicache_merge (host side:
// `KvGeom` in runtime/gpu/src/device/params.rs; its layout test reads it from each of them).
struct Geom {
    row: u32,
    heads: u32,
    head_dim: u32,
    n_ctx: u32,
    wpr: u32,
    wpr0: u32,
    par: u32,
    k_win: u32,
    v_win: u32,
    group: u32,
    resid: u32,
    ngroups: u32,
    n_tokens: u32,
    is_key: u32,
    mag: u32,
    pool: u32,
    pool_pos: u32,
    count: u32,
    cap: u32,
    pend: u32,
    rot_c: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// f32 → u32 with the same order (attention's running max by atomicMax), and back.
fn ord(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn unord(u: u32) -> f32 {
    return bitcast<f32>(select(~u, u & 0x7fffffffu, (u & 0x80000000u) != 0u));
}
