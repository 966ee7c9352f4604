//! Q8_K: not implemented yet (placeholder so the dispatch compiles).

pub fn dequantize(_src: &[u8], _dst: &mut [f32]) {
    todo!("Q8_K dequantize")
}

pub fn quantize(_src: &[f32], _dst: &mut [u8], _imatrix: Option<&[f32]>) {
    todo!("Q8_K quantize")
}

pub fn vec_dot(_n: usize, _w: &[u8], _act: &[u8]) -> f32 {
    todo!("Q8_K vec_dot")
}
