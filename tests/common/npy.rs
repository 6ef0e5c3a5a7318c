//! The float32 `.npy` files `export` writes and the Python side (numpy,
//! MLX, gguf-py) saves, read the one way every test compares them.

use std::path::Path;

/// A little-endian float32, C-order `.npy` file.
pub struct Npy {
    /// The header dictionary's text, as written (padding included).
    pub header: String,
    /// Its shape.
    pub shape: Vec<u64>,
    /// The data's raw bytes.
    pub data: Vec<u8>,
}

/// Reads `path`, asserting it is a version-1 float32 C-order array.
pub fn read(path: &Path) -> Npy {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00", "{}", path.display());
    let len = usize::from(u16::from_le_bytes([b[8], b[9]]));
    let header = String::from_utf8_lossy(&b[10..10 + len]).into_owned();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let dims = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no shape: {header}"));
    let shape = dims
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().unwrap())
        .collect();
    Npy {
        header,
        shape,
        data: b[10 + len..].to_vec(),
    }
}

impl Npy {
    /// The values' bit patterns.
    pub fn bits(&self) -> Vec<u32> {
        self.data
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    }

    /// The values.
    pub fn values(&self) -> Vec<f32> {
        self.bits().into_iter().map(f32::from_bits).collect()
    }
}
