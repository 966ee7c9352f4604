//! IQ4_NL: not implemented yet (placeholder so the dispatch compiles).

pub fn dequantize(_src: &[u8], _dst: &mut [f32]) {
    todo!("IQ4_NL dequantize")
}

pub fn quantize(_src: &[f32], _dst: &mut [u8], _imatrix: Option<&[f32]>) {
    todo!("IQ4_NL quantize")
}

pub fn vec_dot(_n: usize, _w: &[u8], _act: &[u8]) -> f32 {
    todo!("IQ4_NL vec_dot")
}
