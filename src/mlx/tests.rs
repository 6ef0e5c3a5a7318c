//! The bridge's contract: lengths checked before MLX runs, MLX's
//! exceptions returned as errors, and a build without MLX that says how to
//! get it.

use super::*;

/// A 2×64 4-bit matrix of zero codes, scale 1, bias 0.
fn tiny(words: &[u32]) -> AffineWeights<'_> {
    AffineWeights {
        words,
        scales: Floats::F32(&[1.0; 2]),
        biases: Floats::F32(&[0.0; 2]),
        rows: 2,
        cols: 64,
        bits: 4,
        group_size: 64,
    }
}

#[test]
fn mismatched_lengths_are_refused_before_mlx_runs() {
    let words = [0u32; 16];
    let w = tiny(&words);
    let e = quantized_matmul(Device::Cpu, Floats::F32(&[0.0; 63]), 1, &w).unwrap_err();
    assert!(matches!(e, MlxError::Shape(_)), "{e}");
    let e =
        quantized_matmul(Device::Cpu, Floats::F32(&[0.0; 64]), 1, &tiny(&words[..15])).unwrap_err();
    assert!(e.to_string().contains("words"), "{e}");
    let e = dequantize_affine_rows(Device::Cpu, &w, &[2], OutDtype::F32).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    let e = quantized_matmul(
        Device::Cpu,
        Floats::F32(&[0.0; 64]),
        1,
        &AffineWeights {
            bits: 5,
            cols: 36,
            group_size: 36,
            ..w
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("32-bit words"), "{e}");
}

#[cfg(not(feature = "mlx"))]
#[test]
fn without_the_feature_every_call_says_how_to_enable_it() {
    let e = version().unwrap_err();
    assert_eq!(e, MlxError::NotBuilt);
    assert!(e.to_string().contains("--features mlx"));
    assert!(e.to_string().contains("pip install"));
}

#[cfg(feature = "mlx")]
#[test]
fn the_bridge_reports_version_and_device() {
    assert!(version().unwrap().starts_with("0."));
    let d = default_device().unwrap();
    assert!(d == "cpu" || d == "gpu", "{d}");
    assert_eq!(device_name(Device::Cpu).unwrap(), "cpu");
}

#[cfg(feature = "mlx")]
#[test]
fn mlx_exceptions_become_errors() {
    let words = [0u32; 16];
    let y = quantized_matmul(Device::Cpu, Floats::F32(&[1.0; 64]), 1, &tiny(&words)).unwrap();
    assert_eq!(y, vec![0.0, 0.0]);
    // Lengths that agree with each other but a group size MLX refuses:
    // MLX throws, and the call returns Err instead of aborting.
    let w = AffineWeights {
        group_size: 48,
        cols: 96,
        words: &[0u32; 24],
        scales: Floats::F32(&[1.0; 4]),
        biases: Floats::F32(&[0.0; 4]),
        ..tiny(&words)
    };
    match quantized_matmul(Device::Cpu, Floats::F32(&[0.0; 96]), 1, &w) {
        Err(MlxError::Mlx(msg)) => assert!(msg.contains("group"), "{msg}"),
        other => panic!("expected an MLX error, got {other:?}"),
    }
}

#[cfg(feature = "mlx")]
#[test]
fn gather_qmm_with_a_global_scale_is_refused_on_the_cpu_before_mlx_runs() {
    // One expert, 4×64 of zero codes: the lengths agree, so only the
    // device decides.
    let (x, words, scales) = ([1.0f32; 64], [0u32; 32], [0x38u8; 16]);
    let e = gather_qmm_nvfp4(Device::Cpu, &x, 1, &words, &scales, &[1.0], 4, 64, 0).unwrap_err();
    assert!(matches!(e, MlxError::UnsupportedOnCpu { .. }), "{e}");
    // nvfp4_matmul then takes the CPU's way.
    let (y, path) = nvfp4_matmul(Device::Cpu, &x, 1, &words, &scales, &[1.0], 4, 64, 0).unwrap();
    assert_eq!(path, Nvfp4Path::DequantizeMatmul);
    assert_eq!(y, vec![0.0; 4]);
}
