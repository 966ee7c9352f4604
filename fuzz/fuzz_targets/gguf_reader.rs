//! Feeds arbitrary bytes to the GGUF reader. Whatever it accepts must be
//! internally consistent: every tensor view lies inside the file, has the
//! size its shape and type imply, and every typed getter answers without
//! panicking.
#![no_main]

use clover::gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    assert!(file.alignment().is_power_of_two());
    for (key, _) in file.metadata() {
        assert!(file.get(key).is_some());
        let _ = file.get_u32(key);
        let _ = file.get_u64(key);
        let _ = file.get_i64(key);
        let _ = file.get_f32(key);
        let _ = file.get_bool(key);
        let _ = file.get_str(key);
        let _ = file.get_str_array(key);
        let _ = file.get_u32_array(key);
        let _ = file.get_i32_array(key);
    }
    let mut end_max = 0u64;
    for info in file.tensors() {
        let view = file.view(info);
        assert_eq!(view.data.len() as u64, info.n_bytes);
        let rows: u64 = info.dims[1..].iter().product();
        assert_eq!(
            info.ty.row_bytes(info.dims[0]).unwrap() * rows,
            info.n_bytes
        );
        assert_eq!(info.offset % file.alignment(), 0);
        assert!(file.tensor(&info.name).is_some());
        end_max = end_max.max(info.offset + info.n_bytes);
    }
    assert!(end_max <= file.file_size());
});
