//! MiniCache's per-(token, kv-head) merge of two layers' vectors (the math of `kv`'s module doc,
//! "MiniCache"): magnitudes, the SLERP direction and the angular distance the retention rule
//! reads. Plain functions, so the GPU parity tests can call them.

/// Below this `sin θ` the two directions are treated as parallel (or opposite) and SLERP falls
/// back to the linear blend `(1 − t)·u_a + t·u_b`.
pub const SLERP_EPS: f32 = 1e-6;

/// One merged (token, kv-head): `‖x_a‖`, `‖x_b‖`, the SLERP direction (unit length up to
/// rounding; zero when both vectors are zero) and the angular distance `d = θ / π ∈ [0, 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub norm_a: f32,
    pub norm_b: f32,
    pub dir: Vec<f32>,
    pub distance: f32,
}

/// `‖x‖` (f32, summed in order).
pub fn norm(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum::<f32>().sqrt()
}

/// `x / ‖x‖` (zeros when `‖x‖ = 0`).
pub fn unit(x: &[f32], n: f32) -> impl Iterator<Item = f32> + '_ {
    let inv = if n > 0.0 { 1.0 / n } else { 0.0 };
    x.iter().map(move |v| v * inv)
}

/// Merge layer `a`'s vector (weight `1 − t`) with layer `b`'s (weight `t`):
/// `u = x/‖x‖`, `cos θ = clamp(u_a·u_b, −1, 1)`, `θ = acos(cos θ)`,
/// `e = (sin((1 − t)θ)·u_a + sin(tθ)·u_b) / sin θ` (linear blend when `sin θ < SLERP_EPS`).
pub fn slerp_merge(xa: &[f32], xb: &[f32], t: f32) -> Merged {
    let (na, nb) = (norm(xa), norm(xb));
    let ua: Vec<f32> = unit(xa, na).collect();
    let ub: Vec<f32> = unit(xb, nb).collect();
    let cos = ua
        .iter()
        .zip(&ub)
        .map(|(a, b)| a * b)
        .sum::<f32>()
        .clamp(-1.0, 1.0);
    let theta = cos.acos();
    let sin = theta.sin();
    let (wa, wb) = if sin < SLERP_EPS {
        (1.0 - t, t)
    } else {
        (((1.0 - t) * theta).sin() / sin, (t * theta).sin() / sin)
    };
    let dir = ua.iter().zip(&ub).map(|(a, b)| wa * a + wb * b).collect();
    Merged {
        norm_a: na,
        norm_b: nb,
        dir,
        distance: theta / std::f32::consts::PI,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slerp_of_orthogonal_vectors_is_unit_and_weighted() {
        let a = [3.0f32, 0.0, 0.0];
        let b = [0.0f32, 0.5, 0.0];
        let m = slerp_merge(&a, &b, 0.5);
        assert_eq!((m.norm_a, m.norm_b), (3.0, 0.5));
        assert!((m.distance - 0.5).abs() < 1e-6);
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((m.dir[0] - h).abs() < 1e-6 && (m.dir[1] - h).abs() < 1e-6);
        // t = 0 gives layer a's direction, t = 1 layer b's.
        let m0 = slerp_merge(&a, &b, 0.0);
        assert!((m0.dir[0] - 1.0).abs() < 1e-6 && m0.dir[1].abs() < 1e-6);
        let m1 = slerp_merge(&a, &b, 1.0);
        assert!(m1.dir[0].abs() < 1e-6 && (m1.dir[1] - 1.0).abs() < 1e-6);
        // t = 0.25: the angle to a is a quarter of θ.
        let m = slerp_merge(&a, &b, 0.25);
        assert!((m.dir[0] - (std::f32::consts::PI / 8.0).cos()).abs() < 1e-6);
        assert!((norm(&m.dir) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn parallel_opposite_and_zero_vectors_do_not_divide_by_zero() {
        let m = slerp_merge(&[1.0, 2.0], &[2.0, 4.0], 0.6);
        assert!(m.distance.abs() < 1e-3);
        assert!(m.dir.iter().all(|v| v.is_finite()));
        assert!((norm(&m.dir) - 1.0).abs() < 1e-5);
        let m = slerp_merge(&[1.0, 0.0], &[-1.0, 0.0], 0.5);
        assert!((m.distance - 1.0).abs() < 1e-6);
        assert!(m.dir.iter().all(|v| v.is_finite()));
        let m = slerp_merge(&[0.0, 0.0], &[0.0, 0.0], 0.5);
        assert_eq!(m.dir, vec![0.0, 0.0]);
        assert_eq!((m.norm_a, m.norm_b), (0.0, 0.0));
    }
}
