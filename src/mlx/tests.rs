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
