//! `clover synth`'s direct fill (random quantised blocks, used for the big
//! presets): determinism, valid blocks, spread, and that the test-sized
//! presets keep the reference fill.

use std::path::Path;

use clover::synth::weights::{init_for, Fill, Init};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn small(recipe: Recipe, seed: u64) -> SynthOptions {
    SynthOptions {
        arch: Arch::Qwen35Moe,
        preset: Preset::Small,
        recipe,
        seed,
    }
}

fn write_direct(o: SynthOptions, path: &Path, threads: Option<usize>) -> Vec<u8> {
    let mut plan = synth::plan(o).unwrap();
    plan.fill = Fill::Direct;
    let n = plan.write(path, threads).unwrap();
    assert_eq!(n, plan.file_bytes(), "dry-run size must match the file");
    std::fs::read(path).unwrap()
}

#[test]
fn tiny_and_small_keep_the_reference_fill_and_the_big_presets_use_direct() {
    for (preset, fill) in [
        (Preset::Tiny, Fill::Reference),
        (Preset::Small, Fill::Reference),
        (Preset::A3b4l, Fill::Direct),
        (Preset::Full, Fill::Direct),
    ] {
        let plan = synth::plan(SynthOptions {
            arch: Arch::CloverMoe,
            preset,
            recipe: Recipe::Q4KM,
            seed: 0,
        })
        .unwrap();
        assert_eq!(plan.fill, fill, "{preset}");
    }
}

#[test]
fn direct_fill_gives_identical_bytes_whatever_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let o = small(Recipe::Q4KM, 9);
    let a = write_direct(o, &dir.path().join("a.gguf"), Some(1));
    let b = write_direct(o, &dir.path().join("b.gguf"), Some(3));
    let c = write_direct(o, &dir.path().join("c.gguf"), Some(2));
    assert!(a == b, "1 thread and 3 threads differ");
    assert!(a == c, "1 thread and 2 threads differ");
    let d = write_direct(small(Recipe::Q4KM, 10), &dir.path().join("d.gguf"), Some(2));
    assert_eq!(a.len(), d.len());
    assert!(a != d, "different seeds give the same weights");
    let mut reference = synth::plan(o).unwrap();
    reference.fill = Fill::Reference;
    reference
        .write(&dir.path().join("r.gguf"), Some(2))
        .unwrap();
    let r = std::fs::read(dir.path().join("r.gguf")).unwrap();
    assert_eq!(a.len(), r.len());
    assert!(a != r, "the direct fill wrote the reference bytes");
}

/// Every recipe's file reads back, every tensor dequantises to finite values,
/// and normal-initialised matrices have their documented standard deviation.
#[test]
fn direct_fill_of_every_recipe_reads_back_with_the_documented_spread() {
    let dir = tempfile::tempdir().unwrap();
    for recipe in Recipe::ALL {
        let path = dir.path().join(format!("{}.gguf", recipe.name()));
        write_direct(small(recipe, 4), &path, Some(2));
        let plan = synth::plan(small(recipe, 4)).unwrap();
        let file = clover::gguf::GgufFile::open(&path).unwrap();
        assert_eq!(file.tensors().len(), plan.n_tensors());
        for ((info, ty), spec) in file.tensors().iter().zip(&plan.types).zip(&plan.specs) {
            assert_eq!(info.ty, *ty, "{}", info.name);
            let row = info.dims[0] as usize;
            let row_bytes = info.ty.row_bytes(row as u64).unwrap() as usize;
            let rows = (info.n_elements() as usize / row).min(64);
            let view = file.view(info);
            let mut x = vec![0f32; row * rows];
            for (r, out) in x.chunks_exact_mut(row).enumerate() {
                let src = &view.data[r * row_bytes..(r + 1) * row_bytes];
                clover::kernels::scalar::dequantize_row(info.ty, src, out);
            }
            assert!(x.iter().all(|v| v.is_finite()), "{}: non-finite", info.name);
            if let Init::Normal { std } = init_for(spec) {
                if x.len() < 4096 {
                    continue;
                }
                let n = x.len() as f64;
                let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
                let s = (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
                assert!(
                    (s / std - 1.0).abs() < 0.1,
                    "{} {recipe:?} {}: std {s}, wanted {std}",
                    info.name,
                    info.ty
                );
                assert!(
                    mean.abs() < 0.1 * std,
                    "{} {recipe:?}: mean {mean}",
                    info.name
                );
            }
        }
    }
}
