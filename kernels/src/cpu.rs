//! What the CPU can run: the instruction-set tiers and their detection, in one
//! place. Kernels and model code ask here (`Isa::available`, [`has_fma`]),
//! never `is_x86_feature_detected!` on their own.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
    Neon,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsaError(pub String);

impl fmt::Display for IsaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IsaError {}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s))
    }

    /// Whether this host can run the tier.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every tier this host can run, slowest first.
    pub fn all_available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.available()).collect()
    }

    /// The fastest tier this host can run.
    pub fn detect() -> Isa {
        *Isa::all_available().last().unwrap_or(&Isa::Scalar)
    }

    /// The tier named by `CLOVER_ISA`, or the detected one when it is unset.
    pub fn from_env() -> Result<Isa, IsaError> {
        match std::env::var("CLOVER_ISA") {
            Err(_) => Ok(Isa::detect()),
            Ok(s) if s.is_empty() => Ok(Isa::detect()),
            Ok(s) => {
                let isa = Isa::from_name(&s).ok_or_else(|| {
                    IsaError(format!(
                        "CLOVER_ISA={s} is not one of scalar, avx2, avx512, neon"
                    ))
                })?;
                if !isa.available() {
                    return Err(IsaError(format!(
                        "CLOVER_ISA={s}: this CPU does not support {}",
                        isa.name()
                    )));
                }
                Ok(isa)
            }
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the CPU is Intel's (`GenuineIntel` in CPUID leaf 0): the repacked
/// kernels' software prefetch distance differs between vendors.
pub fn is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *INTEL.get_or_init(|| {
            #[allow(unused_unsafe)]
            // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
            let r = unsafe { std::arch::x86_64::__cpuid(0) };
            let mut v = [0u8; 12];
            v[..4].copy_from_slice(&r.ebx.to_le_bytes());
            v[4..8].copy_from_slice(&r.edx.to_le_bytes());
            v[8..].copy_from_slice(&r.ecx.to_le_bytes());
            &v == b"GenuineIntel"
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has FMA (x86; the scalar helpers' fused multiply-add path).
pub fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FMA.get_or_init(|| std::arch::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has FMA, AVX and F16C (x86; f16 rows converted in
/// vectors by the scalar helpers).
pub fn has_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static F16C: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *F16C.get_or_init(|| {
            has_fma()
                && std::arch::is_x86_feature_detected!("avx")
                && std::arch::is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX2 (x86).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// The vendor read from CPUID is the one the kernel reports.
    #[test]
    fn is_intel_agrees_with_proc_cpuinfo() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let Some(line) = info.lines().find(|l| l.starts_with("vendor_id")) else {
            return;
        };
        assert_eq!(super::is_intel(), line.contains("GenuineIntel"), "{line}");
    }
}
