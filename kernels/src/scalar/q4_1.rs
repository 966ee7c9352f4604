//! Q4_1: not implemented yet (placeholder so the dispatch compiles).

pub fn dequantize(_src: &[u8], _dst: &mut [f32]) {
    todo!("Q4_1 dequantize")
}

pub fn quantize(_src: &[f32], _dst: &mut [u8], _imatrix: Option<&[f32]>) {
    todo!("Q4_1 quantize")
}

pub fn vec_dot(_n: usize, _w: &[u8], _act: &[u8]) -> f32 {
    todo!("Q4_1 vec_dot")
}
